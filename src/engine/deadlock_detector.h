// DeadlockDetector: set rank 0's judgement that a process set is deadlocked.
//
// Note [Deadlock detection]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A stall (some ranks submitted a name, others did not yet) is usually a
// slow rank, so it fails only after the generous LOCKSTEP_STALL_TIMEOUT. It
// is a deadlock, reported within about a second, when it can never resolve:
//   * every non-joined rank of the set is blocked: one of its threads waits
//     in Handle::wait()/wait_for() (barrier, join, a synchronous collective)
//     and it submitted nothing to the engine since the previous cycle
//     (WaitTracker; a rank that is computing, sleeping or still submitting is
//     not blocked, however long it takes), and
//   * the set has pending operations, none of which became ready and no rank
//     announced anything new: a name pending on every rank would have run.
// Each rank samples its own blocked flag before draining its submissions,
// and the flags travel in the negotiation header, so every rank sees the
// same flags. Set rank 0 times how long the condition has held without a
// break; after LOCKSTEP_DEADLOCK_TIMEOUT (1 s) it asks for StallAction::
// kDeadlock in the next header, which is also a stall-report cycle: every
// rank then fails its pending operations of the set with a DeadlockError
// naming which ranks did and did not submit each one, in the same cycle.
//
// The one program it misjudges is one whose ranks all wait on one thread
// while another thread of some rank will, later, submit the operation the
// others wait for; set LOCKSTEP_DEADLOCK_TIMEOUT above that delay (or 0 to
// turn detection off).
//
// Thread-safety: none; owned by one ProcessSetWorker (set rank 0 only).
#pragma once

#include <chrono>
#include <optional>

#include "engine/negotiator.h"

namespace lockstep::engine::detail {

class DeadlockDetector {
 public:
  using Clock = std::chrono::steady_clock;
  // timeout_s <= 0 never reports.
  explicit DeadlockDetector(double timeout_s) : timeout_s_(timeout_s) {}

  // After each cycle: true when the next header must carry kDeadlock.
  bool observe(const CycleResult& result, Clock::time_point now);
  // Seconds the current deadlock had held when it was reported.
  double reported_after_s() const { return reported_after_s_; }

 private:
  double timeout_s_;
  std::optional<Clock::time_point> since_;
  double reported_after_s_ = 0;
};

// Whether the condition of Note [Deadlock detection] holds after `result`.
bool all_blocked_without_progress(const CycleResult& result);

}  // namespace lockstep::engine::detail
