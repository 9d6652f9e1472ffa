#include "lockstep/torch/memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>

#include "lockstep/base/mutex.h"

namespace lockstep::torch {

// Receives c10's per-allocation reports (ProfiledCPUMemoryReporter on CPU,
// the caching allocator on CUDA). A mutex rather than two atomics: current
// and peak must move together.
struct AllocationTracker::Reporter : c10::MemoryReportingInfoBase {
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, int64_t /*total_allocated*/,
                         int64_t /*total_reserved*/, c10::Device /*device*/) override {
    MutexLock lock(mutex);
    current += alloc_size;
    if (alloc_size > 0) ++allocations;
    peak = std::max(peak, current);
  }
  bool memoryProfilingEnabled() const override { return true; }

  // Reports come on the tracking thread and autograd's; reads on any thread.
  Mutex mutex;
  int64_t current LOCKSTEP_GUARDED_BY(mutex) = 0;
  int64_t peak LOCKSTEP_GUARDED_BY(mutex) = 0;
  int64_t allocations LOCKSTEP_GUARDED_BY(mutex) = 0;
};

// DebugInfoGuard restores the previous reporter when it goes; it must be
// destroyed on the thread that created it, as the tracker must.
struct AllocationTracker::Installed {
  explicit Installed(std::shared_ptr<c10::DebugInfoBase> info)
      : guard(c10::DebugInfoKind::PROFILER_STATE, std::move(info)) {}
  c10::DebugInfoGuard guard;
};

AllocationTracker::AllocationTracker()
    : reporter_(std::make_shared<Reporter>()), installed_(std::make_unique<Installed>(reporter_)) {}

AllocationTracker::~AllocationTracker() = default;

int64_t AllocationTracker::current_bytes() const {
  MutexLock lock(reporter_->mutex);
  return reporter_->current;
}

int64_t AllocationTracker::peak_bytes() const {
  MutexLock lock(reporter_->mutex);
  return reporter_->peak;
}

void AllocationTracker::reset_peak() {
  MutexLock lock(reporter_->mutex);
  reporter_->peak = reporter_->current;
}

int64_t AllocationTracker::allocations() const {
  MutexLock lock(reporter_->mutex);
  return reporter_->allocations;
}

}  // namespace lockstep::torch
