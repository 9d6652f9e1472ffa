#include "comm/transport/nccl/nccl_watchdog.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "comm/transport/nccl/nccl_runtime.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"

namespace lockstep::comm::nccl {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// A dead local peer is found within this, without a syscall per poll.
constexpr milliseconds kLivenessPeriod{10};
// How long close() lets the peers finalize before aborting instead.
constexpr milliseconds kCloseGrace{5000};

double seconds_since(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

Watchdog::Watchdog(kit::WaitPolicy policy, kit::PeerLiveness liveness, int rank, int size)
    : policy_(policy), liveness_(std::move(liveness)), rank_(rank), size_(size) {}

Watchdog::~Watchdog() { close(); }

void Watchdog::check_usable() const {
  if (!broken_.empty())
    throw Aborted("this nccl communicator was aborted by an earlier error (" + broken_ +
                  "); create a new one or exit");
}

void Watchdog::abandon(std::string reason) {
  if (broken_.empty()) abort_comm(reason);
}

void Watchdog::abort_comm(const std::string& reason) {
  broken_ = reason;
  // ncclCommAbort makes the communicator's kernels exit, so nothing queued
  // behind them on the stream waits forever either.
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void Watchdog::settle(ncclResult_t result, std::string_view what, Clock::time_point since) {
  if (result == ncclSuccess) return;
  if (result != ncclInProgress) fail_nccl(what, result);
  poll(
      [&] {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) fail_nccl(what, r);
        if (state != ncclSuccess && state != ncclInProgress) fail_nccl(what, state);
        return state == ncclSuccess;
      },
      what, since);
}

void Watchdog::poll(const std::function<bool()>& done, std::string_view what,
                    Clock::time_point since) {
  check_usable();
  kit::WaitWarnings warnings(policy_.warning);
  const Clock::time_point spin_until = Clock::now() + policy_.spin;
  microseconds nap{10};
  for (;;) {
    if (done()) return;
    check_async(what);
    check_peers(what, since);
    auto waited = duration_cast<milliseconds>(Clock::now() - since);
    if (waited >= policy_.timeout) fail_timeout(what, seconds_since(since));
    if (warnings.due(waited))
      log(LogLevel::kWarning, "nccl backend: {} has been waiting {:.1f} s (rank {} of {})", what,
          waited.count() / 1000.0, rank_, size_);
    if (Clock::now() < spin_until) continue;
    // Short naps: a GPU collective is often done within tens of
    // microseconds, and a deferred caller waits here once per step.
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, microseconds(200));
  }
}

void Watchdog::check_async(std::string_view what) {
  if (!comm_) return;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) fail_nccl(what, r);
  if (state != ncclSuccess && state != ncclInProgress) fail_nccl(what, state);
}

void Watchdog::check_peers(std::string_view what, Clock::time_point since) {
  Clock::time_point now = Clock::now();
  if (now < next_liveness_check_) return;
  next_liveness_check_ = now + kLivenessPeriod;
  int dead = liveness_.find_dead();
  if (dead < 0) return;
  std::string reason = fmt::format(
      "nccl backend: {} on rank {} of {}: rank {} (pid {}) died after {:.1f} s of waiting", what,
      rank_, size_, dead, liveness_.pid(dead), seconds_since(since));
  abort_comm(reason);
  throw PeerFailure(dead, reason);
}

void Watchdog::fail_nccl(std::string_view what, ncclResult_t result) {
  std::string reason = fmt::format("nccl backend: {} failed on rank {} of {}: {}", what, rank_,
                                   size_, nccl_text(result, comm_));
  // NCCL may notice a dead peer (its sockets closing) before the next
  // liveness check: name it when it is one of ours.
  if (int dead = liveness_.find_dead(); dead >= 0) {
    reason += fmt::format("; rank {} (pid {}) has died", dead, liveness_.pid(dead));
    abort_comm(reason);
    throw PeerFailure(dead, reason);
  }
  abort_comm(reason);
  // A remote error is a peer (or its host) failing; NCCL does not say which.
  if (result == ncclRemoteError || result == ncclSystemError) throw PeerFailure(-1, reason);
  throw Error(reason);
}

void Watchdog::fail_timeout(std::string_view what, double waited_s) {
  std::string reason = fmt::format(
      "nccl backend: {} did not complete within {:.1f} s on rank {} of {} (LOCKSTEP_TIMEOUT); "
      "the peers on this host are alive, so a rank is elsewhere in the program or on a host "
      "that stopped answering",
      what, waited_s, rank_, size_);
  abort_comm(reason);
  throw TimeoutError(reason);
}

void Watchdog::fail_cuda(std::string_view what, const std::string& cuda_text) {
  std::string reason = fmt::format("nccl backend: {} failed on rank {} of {}: CUDA error {}", what,
                                   rank_, size_, cuda_text);
  abort_comm(reason);
  throw Error(reason);
}

void Watchdog::close() {
  if (!comm_) return;
  ncclComm_t comm = comm_;
  if (blocking_) {
    // Every collective of this rank has completed (the backend waited for
    // its stream), so nothing of ours is left for the peers to wait on.
    ncclCommAbort(comm);
    comm_ = nullptr;
    return;
  }
  // Finalize flushes the communicator's work and says goodbye to the peers;
  // a peer that is gone would keep it in progress, so it gets a grace
  // period and then the abort.
  ncclResult_t r = ncclCommFinalize(comm);
  const Clock::time_point deadline = Clock::now() + kCloseGrace;
  ncclResult_t state = r;
  while (state == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
  }
  if (state == ncclSuccess)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);
  comm_ = nullptr;
}

}  // namespace lockstep::comm::nccl
