// One trial of a sweep as the sweep loop sees it (Note [Sweep loop] in
// sweep.h): its configuration, its process while it runs, the metric values
// it has reported, and how it ended.
#pragma once

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/common/process.h"
#include "tools/sweep/slots.h"
#include "tools/sweep/space.h"

namespace lockstep::sweep {

enum class Status { kPending, kRunning, kCompleted, kStopped, kFailed, kTimeout };

const char* status_name(Status s);
Status parse_status(const std::string& name);  // of an "end" event
inline bool ended(Status s) { return s != Status::kPending && s != Status::kRunning; }
// A failed or timed-out trial's last value is no result to rank.
inline bool counts_for_best(Status s) { return s == Status::kCompleted || s == Status::kStopped; }

struct Trial {
  using Clock = std::chrono::steady_clock;

  int id = 0;
  Config params;
  int attempt = 0;  // 1 for the first start
  Status status = Status::kPending;
  std::string reason;
  std::string dir, metrics_path, log_path;

  // While running.
  std::unique_ptr<tools::ChildProcess> process;
  Placement placement;
  Clock::time_point started;
  bool stopping = false;  // SIGTERM sent; `stop_as` is the status to record
  bool killed = false;    // SIGKILL sent too
  Status stop_as = Status::kStopped;
  Clock::time_point stop_sent;
  std::optional<Clock::time_point> budget_reached;
  size_t metrics_offset = 0;
  std::string partial_line;
  int lines_read = 0;

  // Results (also restored from the journal for ended trials).
  std::vector<double> values;  // the metric after each reported epoch
  int epochs = 0;              // last epoch reported
  double seconds = 0;

  double value() const { return values.empty() ? std::nan("") : values.back(); }
};

}  // namespace lockstep::sweep
