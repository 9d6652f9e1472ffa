// Whether peer processes on this host are still running.
//
// Every transport needs to tell a dead peer from a slow one: shm and mpi
// poll it while they wait, gloo asks after a connection error. A peer is
// watched when its pid is known and it runs on this host; the check is a
// pidfd (readable once the process exited, zombie included) or, where
// pidfd_open is unavailable, kill(pid, 0). Unwatched peers (remote, self,
// pid unknown) are reported alive: the caller's deadline covers them.
//
// Not thread-safe (one caller at a time, like the backends that own it).
// Owns the pidfds; move-only.
#pragma once

#include <string>
#include <vector>

namespace lockstep::comm::kit {

class PeerLiveness {
 public:
  PeerLiveness() = default;
  // pids[r]: rank r's pid, or 0 when it is not on this host (or unknown).
  // `self` is never watched.
  PeerLiveness(std::vector<int> pids, int self);
  ~PeerLiveness();
  PeerLiveness(PeerLiveness&& other) noexcept;
  PeerLiveness& operator=(PeerLiveness&& other) noexcept;
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  bool watched(int rank) const;
  // False once a watched peer's process has exited.
  bool alive(int rank) const;
  // The lowest watched rank that has exited, or -1.
  int find_dead() const;
  int pid(int rank) const { return pids_[rank]; }

 private:
  void close_all();
  std::vector<int> pids_;
  std::vector<int> pidfds_;  // -1: use kill(pid, 0); kGone: dead before we looked
};

}  // namespace lockstep::comm::kit
