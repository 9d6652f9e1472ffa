// Allocator-level memory accounting: what LibTorch's allocators hand out to
// the calling thread while an AllocationTracker is alive.
//
//   lt::AllocationTracker tracker;
//   auto loss = model->forward(x).sum();   // activations kept for backward
//   loss.backward();
//   tracker.peak_bytes();                   // the step's high-water mark
//
// How: the tracker installs itself as the thread's c10 memory reporter (the
// hook torch's profiler uses for profile_memory), so every allocation and
// free of the CPU allocator (and of the CUDA caching allocator, on a CUDA
// build) made on this thread, or on autograd threads working for it, is
// reported with its size. current_bytes() is allocations minus frees since
// construction: memory freed inside the window that was allocated before it
// is not reported by LibTorch, so it does not lower the count. Not what the
// OS sees (allocator caches, fragmentation): what tensors hold.
//
// LibTorch's CPU allocator logs, once per process (then at every 1000th such
// free), "Memory block of unknown size was allocated before the profiling
// started": a block allocated before a tracker was freed while one was
// installed, the case above. Harmless, and no order of installing avoids it
// (the allocator learns sizes only while a reporter is installed, and the
// flag that would make it learn them always logs every allocation).
//
// Not together with torch's own profiler on the same thread (one reporter per
// thread; the newer wins while alive). Trackers nest; the inner one hides the
// outer while alive. Construct and destroy on the same thread. The counters
// are safe to read from any thread.
#pragma once

#include <cstdint>
#include <memory>

namespace lockstep::torch {

class AllocationTracker {
 public:
  AllocationTracker();
  ~AllocationTracker();
  AllocationTracker(const AllocationTracker&) = delete;
  AllocationTracker& operator=(const AllocationTracker&) = delete;

  // Bytes allocated minus bytes freed since construction.
  int64_t current_bytes() const;
  // The highest current_bytes() since construction or reset_peak().
  int64_t peak_bytes() const;
  // Starts a new high-water mark at current_bytes().
  void reset_peak();
  // Allocations seen (frees not counted): 0 means nothing was reported.
  int64_t allocations() const;

  struct Reporter;

 private:
  std::shared_ptr<Reporter> reporter_;
  struct Installed;
  std::unique_ptr<Installed> installed_;
};

}  // namespace lockstep::torch
