// Time to accuracy, measured the MLPerf way: a training clock that stops
// while the model is evaluated, evaluation points every F of an epoch, and
// the first evaluation at or above the target ends the run.
//
// Single-threaded; every rank keeps its own (ranks evaluate and decide
// together, so they agree on when the target was reached).
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace lockstep::examples {

using Clock = std::chrono::steady_clock;

// When this process started (from /proc/self/stat), on the steady clock, so
// wall time includes loading LibTorch and the data, not just main().
Clock::time_point process_start();

// A stopwatch that only runs while training.
class TrainingClock {
 public:
  void resume();
  void pause();
  double seconds() const;  // accumulated, including a running stretch

 private:
  double total_ = 0;
  std::optional<Clock::time_point> since_;
};

struct TargetResult {
  double training_s = 0;  // training only, evaluation excluded
  double wall_s = 0;      // from process start, everything included
  double epochs = 0;      // fractional epochs trained
};

// Where the evaluations fall and whether the target was met.
class EvalSchedule {
 public:
  // interval: fraction of an epoch between evaluations; target 0: none.
  EvalSchedule(double interval, double target);

  // True once `epochs_done` reached the next evaluation point.
  bool due(double epochs_done) const;
  // Records an evaluation; true when it reached the target (the run stops).
  bool record(double epochs_done, double accuracy, const TrainingClock& clock);

  bool has_target() const { return target_ > 0; }
  double target() const { return target_; }
  const std::optional<TargetResult>& result() const { return result_; }
  double best_accuracy() const { return best_; }
  // "time to target 0.9: 12.3 s training, 20.1 s wall, 1.25 epochs" (or not reached).
  std::string summary(int epochs_run) const;

 private:
  double interval_, target_;
  double next_ = 0;  // epochs_done at the next evaluation
  double best_ = 0;
  std::optional<TargetResult> result_;
};

}  // namespace lockstep::examples
