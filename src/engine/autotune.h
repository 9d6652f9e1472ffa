// Autotuner: picks the fusion threshold online, on set rank 0 of the global
// process set; the choice reaches the other ranks in the negotiation header
// (Note [Negotiation]), so all ranks always fuse identically.
//
// Each candidate threshold is used for `samples` cycles that moved allreduce
// data; its score is bytes / time spent executing those cycles. After the
// last candidate the best one is kept for good and logged.
//
// Thread-safety: none; used by one ProcessSetWorker's thread.
#pragma once

#include <cstddef>
#include <vector>

namespace lockstep::engine::detail {

class Autotuner {
 public:
  Autotuner(size_t initial_threshold, size_t samples);

  size_t threshold() const { return current_; }
  bool converged() const { return converged_; }
  // One executed cycle: allreduce bytes moved and seconds spent.
  void record(size_t bytes, double seconds);

 private:
  void next_candidate();

  std::vector<size_t> candidates_;
  std::vector<double> scores_;
  size_t index_ = 0;
  size_t samples_;
  size_t seen_ = 0;
  double bytes_ = 0, seconds_ = 0;
  size_t current_;
  bool converged_ = false;
};

}  // namespace lockstep::engine::detail
