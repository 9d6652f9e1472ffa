// EngineContext: what the process-set workers of one Engine share.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "engine/flight_recorder.h"
#include "engine/timeline.h"
#include "engine/wait_tracker.h"
#include "lockstep/base/mutex.h"
#include "lockstep/engine/engine.h"

namespace lockstep::engine::detail {

struct EngineContext {
  EngineConfig config;
  Timeline timeline;
  // Executed on the global set's worker thread, in negotiated order, on every
  // rank: registers a new process set and returns its id (set by Engine).
  // `world` is the global set's Communicator (members split it).
  std::function<int(const std::vector<int32_t>& ranks, comm::Communicator& world)> add_process_set;
  // What the global set last negotiated; read by Engine accessors.
  std::atomic<size_t> current_threshold{0};
  // What this rank asks for (only set rank 0 of the global set is heard).
  std::atomic<size_t> requested_threshold{0};
  std::atomic<bool> autotune_converged{false};
  // This rank's last operations (Note [Flight recorder]); set by Engine.
  std::shared_ptr<FlightRecorder> flight;
  // Threads of this process waiting on operations of any set.
  std::shared_ptr<WaitTracker> waits = std::make_shared<WaitTracker>();
  // Moves kCuda buffers (Engine::set_device_communicator); null when none.
  // Set once, before any kCuda submission; owned by Engine::Impl.
  std::atomic<comm::Communicator*> device_comm{nullptr};
  // Wakes every worker (set by Engine) so they notice a fatal error.
  std::function<void()> wake_all;

  // The first fatal error (a dead peer, a transport failure): from then on
  // every pending and future operation fails with it. Thread-safe.
  void set_fatal(std::exception_ptr error) {
    {
      MutexLock lock(mu);
      if (fatal) return;
      fatal = error;
    }
    if (wake_all) wake_all();
  }
  std::exception_ptr fatal_error() const {
    MutexLock lock(mu);
    return fatal;
  }

 private:
  mutable Mutex mu;
  std::exception_ptr fatal LOCKSTEP_GUARDED_BY(mu);
};

}  // namespace lockstep::engine::detail
