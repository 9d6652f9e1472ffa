// Internal: the shared state behind a Handle, and the local entry the
// background thread works on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/wait_tracker.h"
#include "lockstep/base/mutex.h"
#include "lockstep/engine/handle.h"

namespace lockstep::engine::detail {

using Clock = std::chrono::steady_clock;

// Completed by the background thread; waited on by callers. A grouped
// operation has one OpState shared by `remaining` entries: it completes when
// the last one does, with the first error seen.
struct OpState {
  explicit OpState(int members, Callback callback)
      : remaining(members), on_done(std::move(callback)) {}

  // Thread-safe. Runs the callback (outside the lock) when the last member
  // completes.
  void complete_one(std::exception_ptr error);

  mutable Mutex mu;
  mutable std::condition_variable cv;  // notified when done turns true
  bool done LOCKSTEP_GUARDED_BY(mu) = false;
  std::exception_ptr error LOCKSTEP_GUARDED_BY(mu);
  int remaining LOCKSTEP_GUARDED_BY(mu);
  Callback on_done LOCKSTEP_GUARDED_BY(mu);
  // Handle::retain_until_done's resources; released once the last member
  // completed (`retired` from then on: later ones are released at once).
  mutable std::vector<std::shared_ptr<void>> retained LOCKSTEP_GUARDED_BY(mu);
  bool retired LOCKSTEP_GUARDED_BY(mu) = false;
  // Results; written by the background thread before completion.
  Shape output_shape;
  std::vector<int64_t> received_splits;
  int value = -1;
  // Counts threads waiting on this operation (set once at submission).
  std::shared_ptr<WaitTracker> waits;
};

// One submitted tensor on this rank. Owned by the ProcessSetWorker's queue
// until its response runs.
struct Entry {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;
  Allocator allocate;
  std::shared_ptr<OpState> state;
  Clock::time_point submitted;
  Clock::time_point ready;            // when negotiation found it ready everywhere
  uint64_t flight_id = 0;             // its FlightRecorder record
  std::shared_ptr<void> ready_event;  // OpOptions::ready_event (kCuda inputs)
};

}  // namespace lockstep::engine::detail
