// WaitTracker: which threads of this process are blocked waiting on engine
// operations, for deadlock detection (Note [Deadlock detection] in
// src/engine/deadlock_detector.h).
//
// Thread-safety: lock-free; any thread. Owned jointly (shared_ptr) by the
// engine and the operations' states, since a Handle may outlive its Engine.
#pragma once

#include <atomic>
#include <cstdint>

namespace lockstep::engine::detail {

struct WaitTracker {
  std::atomic<int> waiting{0};           // threads inside Handle::wait()/wait_for()
  std::atomic<uint64_t> submissions{0};  // operations submitted so far, any set
};

// Counts the calling thread as waiting for its lifetime.
class WaitScope {
 public:
  explicit WaitScope(WaitTracker* tracker) : tracker_(tracker) {
    if (tracker_) tracker_->waiting.fetch_add(1);
  }
  ~WaitScope() {
    if (tracker_) tracker_->waiting.fetch_sub(1);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  WaitTracker* tracker_;
};

}  // namespace lockstep::engine::detail
