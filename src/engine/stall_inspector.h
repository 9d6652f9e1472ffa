// StallInspector: rank 0's clock for names that some ranks submitted and
// others did not. Only set rank 0 times stalls; its decision travels in the
// next cycle's header (Note [Negotiation]), so every rank acts on it in the
// same cycle and builds the same report from replicated data.
//
// Thread-safety: none; owned by one ProcessSetWorker.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/negotiator.h"

namespace lockstep::engine::detail {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;
  // timeout_s <= 0 never aborts; warning_s <= 0 never reports.
  StallInspector(double warning_s, double timeout_s)
      : warning_s_(warning_s), timeout_s_(timeout_s), report_interval_s_(warning_s) {}

  // After each cycle on set rank 0: what to ask for in the next header.
  // Reports repeat at a growing interval (warning_s, then twice that, ...)
  // while the same stall lasts, so a long one is neither silent nor spam.
  StallAction observe(const CycleResult& result, Clock::time_point now);

 private:
  double warning_s_;
  double timeout_s_;
  std::unordered_map<std::string, Clock::time_point> first_seen_;
  Clock::time_point last_report_{};
  double report_interval_s_;  // until the next report; doubles after each
  bool requested_ = false;
};

// Names grouped by the ranks that submitted them, the smallest group (the
// likely culprit) first, in job ranks: "allreduce 'w' submitted by ranks 0,2
// but not by rank 1; ...", or for a deadlock, where every rank is blocked
// waiting, "rank 0 waits in allreduce 'avg_loss', which ranks 1,2 never
// submitted; ranks 1,2 wait in one of allreduce 'g0', ... and 73 more, which
// rank 0 never submitted".
std::string describe_stall(const CycleResult& result, std::span<const int> global_ranks,
                           bool deadlock = false);

}  // namespace lockstep::engine::detail
