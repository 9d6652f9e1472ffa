// lockstep's deadline, liveness and error checks around a non-blocking NCCL
// communicator (nccl_backend.h: "Failures, never a hang").
//
// NCCL reports failures only when asked (ncclCommGetAsyncError) and never
// times out by itself: a collective whose peer died spins on the GPU
// forever. So no wait of the nccl transport blocks in CUDA or NCCL; each
// polls its condition (a CUDA event, or a non-blocking call's progress) and
// in between asks NCCL for an asynchronous error, checks the pids of the
// peers on this host (kit::PeerLiveness, every ~10 ms) and the deadline
// (LOCKSTEP_TIMEOUT), warning at growing intervals before it. A failure
// aborts the communicator (ncclCommAbort: its kernels exit), marks it
// unusable and throws.
//
// Not thread-safe (the backend's one caller at a time). Owns the
// communicator: close() or the destructor releases it.
#pragma once

#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "comm/kit/liveness.h"
#include "comm/kit/wait_policy.h"

namespace lockstep::comm::nccl {

using Clock = std::chrono::steady_clock;

class Watchdog {
 public:
  // `comm` may be null until the communicator exists (set_comm).
  Watchdog(kit::WaitPolicy policy, kit::PeerLiveness liveness, int rank, int size);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set_comm(ncclComm_t comm) { comm_ = comm; }
  // A blocking communicator is aborted at close() rather than finalized:
  // its finalize could block on a peer that is gone.
  void set_blocking(bool blocking) { blocking_ = blocking; }
  ncclComm_t comm() const { return comm_; }
  const kit::WaitPolicy& policy() const { return policy_; }

  // Throws Aborted when an earlier failure left the communicator unusable.
  void check_usable() const;
  bool usable() const { return broken_.empty(); }
  // Marks it unusable without waiting for anyone (Backend::abandon).
  void abandon(std::string reason);

  // The result of a call on the non-blocking communicator: ncclSuccess
  // returns, ncclInProgress is polled until NCCL settles it, anything else
  // fails. `since` starts the deadline.
  void settle(ncclResult_t result, std::string_view what, Clock::time_point since);
  // Polls `done` (which may throw) until it returns true, with the checks
  // above; the deadline runs from `since`.
  void poll(const std::function<bool()>& done, std::string_view what, Clock::time_point since);

  // Aborts and throws lockstep::Error naming `what` and CUDA's error.
  [[noreturn]] void fail_cuda(std::string_view what, const std::string& cuda_text);

  // Finalizes and destroys the communicator, waiting at most a few seconds
  // for the peers (then aborting); aborts at once when broken. Idempotent.
  void close();

 private:
  void check_async(std::string_view what);
  void check_peers(std::string_view what, Clock::time_point since);
  void abort_comm(const std::string& reason);
  [[noreturn]] void fail_nccl(std::string_view what, ncclResult_t result);
  [[noreturn]] void fail_timeout(std::string_view what, double waited_s);

  ncclComm_t comm_ = nullptr;
  kit::WaitPolicy policy_;
  kit::PeerLiveness liveness_;
  int rank_;
  int size_;
  bool blocking_ = false;
  Clock::time_point next_liveness_check_{};
  std::string broken_;  // why the communicator is unusable; empty while usable
};

}  // namespace lockstep::comm::nccl
