// lockstep's own deadline and liveness checks around MPI requests.
//
// MPI has no timeouts and may wait forever on a dead peer, so the MPI backend
// never makes a blocking MPI call once connected: it posts the nonblocking
// form (MPI_Iallreduce, ...) and the Watchdog polls it with MPI_Test, between
// polls checking
//   - liveness of the peers on this host (pids exchanged at start-up,
//     kit::PeerLiveness as in the shm backend): a dead one fails the call
//     with PeerFailure naming it within ~20 ms;
//   - the descriptor of the collective each local peer is in (published in an
//     MPI shared-memory window): a local peer in a different collective at the
//     same position fails the call with MismatchError naming both;
//   - the deadline LOCKSTEP_TIMEOUT: TimeoutError naming the local ranks that
//     have not reached the collective (remote ranks cannot be inspected),
//     with warnings at growing intervals before it (kit::WaitWarnings).
// Peers on other hosts are covered by the deadline, and by mpirun, which by
// default kills the job when a rank dies. After any such failure the posted
// request can never be completed or cancelled, so the communicator is
// unusable (later calls throw Aborted) and the process ends with MPI_Abort
// at exit (mpi_runtime.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/kit/liveness.h"
#include "comm/kit/op_desc.h"
#include "comm/kit/wait_policy.h"

namespace lockstep::comm::mpi {

// Polls `req` until it completes or `timeout` passes, for the start-up steps
// that run before a Watchdog exists (no liveness information yet). Throws
// TimeoutError naming `what` (after marking the process broken).
void wait_until(MPI_Request& req, std::string_view what, std::chrono::milliseconds timeout);

class Watchdog {
 public:
  // Collective over `comm`; every rank must construct it. Fails with
  // TimeoutError if a rank does not join within the policy's timeout.
  // policy.spin: busy-poll before yielding the core.
  Watchdog(MPI_Comm comm, kit::WaitPolicy policy);
  // Frees the shared window once every local peer got here too (a
  // nonblocking barrier, watched); if one never does, the window is left to
  // MPI_Finalize rather than hanging.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Throws Aborted if an earlier failure left the communicator unusable.
  void check_usable() const;
  // Announces this rank's next collective to the local peers.
  void begin(const kit::OpDesc& desc);
  // Polls `req` to completion (status may be null). `peer` is the rank the
  // request depends on, -1 for a collective (peers' descriptors compared),
  // or kAnyPeer (liveness and deadline only).
  void wait(MPI_Request& req, std::string_view what, int peer = -1, MPI_Status* status = nullptr);
  static constexpr int kAnyPeer = -2;
  // Polls MPI_Improbe(src, MPI_ANY_TAG) until a message from `src` is there.
  void probe(int src, std::string_view what, MPI_Message* message, MPI_Status* status);

 private:
  // peer: as for wait().
  void poll(const std::function<bool()>& done, std::string_view what, int peer);
  void check_peers(std::string_view what, int peer);
  void free_window();
  [[noreturn]] void fail_timeout(std::string_view what, int peer, double waited_s);
  void fail(const std::string& reason);
  uint64_t peer_seq(int r) const;
  bool peer_desc(int r, uint64_t seq, kit::OpDesc* out) const;

  struct Slot;  // one rank's entry in the shared window
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  kit::WaitPolicy policy_;
  kit::PeerLiveness liveness_;  // the peers on this host
  std::vector<Slot*> slots_;    // nullptr for peers on other hosts
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  uint64_t seq_ = 0;
  kit::OpDesc current_;
  std::string broken_;  // reason, empty while usable
};

}  // namespace lockstep::comm::mpi
