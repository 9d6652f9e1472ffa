// Internal: the recorder behind LOCKSTEP_PROFILE (include/lockstep/torch/profile.h).
//
// DistributedOptimizer calls the inline hooks below; each loads the
// process-wide recorder pointer, which stays null unless profiling was
// switched on, so an unprofiled run pays one atomic load per hook.
//
// Thread-safety: hooks may run on the training thread and on autograd's
// threads (gradient hooks, the backward-start callback); mu_ guards the
// per-step state. Ownership: the recorder is created once and lives until
// the process exits (hooks may fire during static destruction).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/base/mutex.h"
#include "lockstep/profile/profile.h"

namespace lockstep::torch::detail {

class StepProfiler {
 public:
  StepProfiler(std::string path, int warmup, int steps);

  // The first DistributedOptimizer to register is the one recorded; when it
  // is destroyed the next one to register starts a fresh recording (its
  // gradients differ). Hooks from any other optimizer are ignored.
  bool owned_by(const void* owner) const { return owner_.load(std::memory_order_relaxed) == owner; }
  // `overlap`: the owner's decision (overlaps_backward), recorded with the
  // gradients since it decides how the planner replays them.
  int add_gradient(const void* owner, const std::string& name, int64_t bytes,
                   const std::string& dtype, bool overlap, std::vector<int64_t> shape);
  void detach(const void* owner);
  void zero_grad();
  void backward_function();  // any autograd node starting (RecordFunction)
  void gradient_ready(int id);
  void sync_begin();
  void sync_end();
  void step_end();
  void samples(int64_t n);
  bool recording() const { return !done_.load(std::memory_order_relaxed); }

 private:
  void finish_locked() LOCKSTEP_REQUIRES(mu_);  // writes the file, stops recording

  const std::string path_;
  const int warmup_, steps_;
  std::atomic<bool> done_{false};
  std::atomic<const void*> owner_{nullptr};
  Mutex mu_;
  profile::Profile profile_ LOCKSTEP_GUARDED_BY(mu_);
  // Per gradient, per recorded step.
  std::vector<std::vector<double>> ready_ms_ LOCKSTEP_GUARDED_BY(mu_);
  std::vector<int64_t> ready_ns_ LOCKSTEP_GUARDED_BY(mu_);  // this step, 0 = not yet
  int64_t step_start_ns_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int64_t backward_ns_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int64_t sync_begin_ns_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int64_t sync_end_ns_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int64_t samples_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int seen_steps_ LOCKSTEP_GUARDED_BY(mu_) = 0;
};

extern std::atomic<StepProfiler*> g_step_profiler;

// Reads LOCKSTEP_PROFILE* once; creates the recorder on rank 0 when set.
void init_step_profiler();

inline StepProfiler* step_profiler() { return g_step_profiler.load(std::memory_order_acquire); }

// `owner` is the calling DistributedOptimizer.
inline int profile_add_gradient(const void* owner, const std::string& name, int64_t bytes,
                                const std::string& dtype, bool overlap,
                                std::vector<int64_t> shape = {}) {
  StepProfiler* p = step_profiler();
  return p ? p->add_gradient(owner, name, bytes, dtype, overlap, std::move(shape)) : -1;
}
inline void profile_detach(const void* owner) {
  if (StepProfiler* p = step_profiler()) p->detach(owner);
}
inline void profile_zero_grad(const void* owner) {
  if (StepProfiler* p = step_profiler(); p && p->owned_by(owner)) p->zero_grad();
}
inline void profile_gradient_ready(const void* owner, int id) {
  if (StepProfiler* p = step_profiler(); p && p->owned_by(owner)) p->gradient_ready(id);
}
inline void profile_sync_begin(const void* owner) {
  if (StepProfiler* p = step_profiler(); p && p->owned_by(owner)) p->sync_begin();
}
inline void profile_sync_end(const void* owner) {
  if (StepProfiler* p = step_profiler(); p && p->owned_by(owner)) p->sync_end();
}
inline void profile_step_end(const void* owner) {
  if (StepProfiler* p = step_profiler(); p && p->owned_by(owner)) p->step_end();
}

}  // namespace lockstep::torch::detail
