// What `lockstep sweep` prints: a progress line on stderr (redrawn in place
// on a terminal, a new line whenever the counts change otherwise), one line
// per ended trial, and the final table sorted by the metric.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tools/sweep/asha.h"
#include "tools/sweep/sweep.h"
#include "tools/sweep/trial.h"

namespace lockstep::sweep {

class Output {
 public:
  Output();
  void progress(const std::vector<Trial>& trials, const SweepOptions& o, const Trial* best);
  void finish_progress();  // ends a redrawn line
  void trial_ended(const Trial& t, const SweepOptions& o);
  void table(const std::vector<Trial>& trials, const SweepOptions& o, const Space& space,
             Mode mode);

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  bool drawn_ = false;
  std::string last_;
  Clock::time_point start_, last_draw_;
};

// "lr=0.0012 batch_size=64"
std::string describe_params(const Config& params);

}  // namespace lockstep::sweep
