// Waiting on shared-memory words without hanging and without starving peers.
//
// A wait spins for a short, bounded time (cheap when the peer is running on
// another core; Note [Two spin budgets] in sync.cc), then sleeps on a futex
// with a short timeout so it can keep
// checking, in order: the job-wide abort flag, whether the awaited peer has
// died or left (kit::PeerLiveness), the repeating warning and the deadline
// (kit::WaitPolicy). Writers only issue FUTEX_WAKE when a sleeper is
// registered on the word. Not thread-safe: one Waiter per ShmBackend.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "comm/kit/liveness.h"
#include "comm/kit/wait_policy.h"
#include "comm/transport/shm/segment.h"

namespace lockstep::comm::shm {

// Stores `value` and wakes sleepers, if any.
void publish(WaitWord& word, uint32_t value);

class Waiter {
 public:
  Waiter(Segment& segment, int rank, int size, kit::WaitPolicy policy);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // kArrival: waiting for a peer to reach a collective (it may be computing
  // for milliseconds). kWithinCall: a later step of a collective every rank
  // has reached (the peer is copying or reducing right now).
  enum class Phase { kArrival, kWithinCall };

  // Blocks until word.value has reached `target` (wrap-around aware).
  // `peer` is the rank expected to advance it and `what` names the operation,
  // both for error messages. Throws PeerFailure, TimeoutError or Aborted.
  void wait(WaitWord& word, uint32_t target, int peer, std::string_view what,
            Phase phase = Phase::kArrival);

  // Backend::set_idle_probe: while *blocked > 0, a wait that its spin
  // budget did not satisfy keeps spinning, up to the policy's idle_spin
  // (Note [Spinning while the caller is blocked] in sync.cc).
  void set_idle_probe(const std::atomic<int>* blocked) { idle_probe_ = blocked; }

  // Throws Aborted if another rank has aborted the job's collectives.
  void check_abort();
  // Marks the communicator unusable for every rank; the first reason wins.
  // `dead_rank` >= 0 makes every rank report PeerFailure naming it.
  void abort(const std::string& reason, int dead_rank = -1);
  // False once the peer's process has exited or shut its communicator down.
  bool peer_alive(int rank);
  // The rank of a peer that is no longer alive, or -1.
  int find_dead_peer();

 private:
  void sleep_once(WaitWord& word, uint32_t target);
  bool spin_once(WaitWord& word, uint32_t target, std::chrono::steady_clock::time_point start,
                 Phase phase);
  bool spin_while_idle(WaitWord& word, uint32_t target,
                       std::chrono::steady_clock::time_point start);
  [[noreturn]] void fail_dead(int peer, std::string_view what);
  // The rank to name when a wait for `peer` on `word` lasts: `peer`, or on
  // step counters the rank furthest behind `target`.
  int behind(const WaitWord& word, uint32_t target, int peer);

  Segment& segment_;
  int rank_;
  int size_;
  kit::WaitPolicy policy_;
  kit::PeerLiveness liveness_;
  bool aborted_by_me_ = false;
  std::chrono::nanoseconds spin_budget_;                 // adaptive, for kArrival waits only
  std::chrono::steady_clock::time_point last_return_{};  // when a wait last ended
  const std::atomic<int>* idle_probe_ = nullptr;         // Backend::set_idle_probe
};

}  // namespace lockstep::comm::shm
