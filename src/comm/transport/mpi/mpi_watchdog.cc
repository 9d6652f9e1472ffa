#include "comm/transport/mpi/mpi_watchdog.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "comm/transport/mpi/mpi_runtime.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/comm/types.h"

namespace lockstep::comm::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds dead-peer detection and the cost of the checks between polls.
constexpr auto kCheckEvery = std::chrono::milliseconds(20);
// After spinning, yield the core between polls for this long, then sleep:
// nonblocking collectives progress only inside MPI_Test, so the first phase
// must poll often, but a long wait must not burn a core another rank needs.
constexpr auto kYieldFor = std::chrono::milliseconds(5);
constexpr auto kSleep = std::chrono::microseconds(50);

}  // namespace

// Written only by its owner; read by the local peers.
struct Watchdog::Slot {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> desc0[2];  // indexed by seq & 1
  std::atomic<uint64_t> desc1[2];
};

void wait_until(MPI_Request& req, std::string_view what, std::chrono::milliseconds timeout) {
  auto start = Clock::now();
  for (;;) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (Clock::now() - start > timeout) {
      std::string msg = fmt::format(
          "{}: not every rank joined within {} s (LOCKSTEP_TIMEOUT); check that every rank "
          "creates the communicator",
          what, timeout.count() / 1000.0);
      mark_broken(msg);
      throw TimeoutError(msg);
    }
    std::this_thread::sleep_for(kSleep);
  }
}

Watchdog::Watchdog(MPI_Comm comm, kit::WaitPolicy policy) : comm_(comm), policy_(policy) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  std::vector<int> pids(size_, 0);
  slots_.assign(size_, nullptr);
  int me = static_cast<int>(getpid());
  // Nonblocking with a deadline: the first collective on a new communicator
  // is where an absent rank shows. Once it completes every rank is here, so
  // the blocking set-up calls below cannot wait long.
  MPI_Request req;
  check(MPI_Iallgather(&me, 1, MPI_INT, pids.data(), 1, MPI_INT, comm_, &req),
        "mpi: exchanging pids");
  wait_until(req, "mpi: creating the communicator", policy_.timeout);
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_),
        "mpi: finding the ranks on this host");
  Slot* mine = nullptr;
  check(MPI_Win_allocate_shared(sizeof(Slot), sizeof(Slot), MPI_INFO_NULL, node_comm_, &mine,
                                &window_),
        "mpi: allocating the watchdog window");
  new (mine) Slot{};
  int node_size = 0;
  MPI_Comm_size(node_comm_, &node_size);
  MPI_Group node_group, group;
  MPI_Comm_group(node_comm_, &node_group);
  MPI_Comm_group(comm_, &group);
  for (int n = 0; n < node_size; ++n) {
    int r = -1;
    MPI_Group_translate_ranks(node_group, 1, &n, group, &r);
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    MPI_Win_shared_query(window_, n, &bytes, &unit, &base);
    slots_[r] = static_cast<Slot*>(base);
  }
  for (int r = 0; r < size_; ++r)
    if (!slots_[r]) pids[r] = 0;  // on another host: its pid means nothing here
  liveness_ = kit::PeerLiveness(std::move(pids), rank_);
  MPI_Group_free(&node_group);
  MPI_Group_free(&group);
  MPI_Barrier(node_comm_);  // every slot is constructed before anyone reads it
}

// liveness_ outlives free_window(), which still checks the peers through it.
Watchdog::~Watchdog() { free_window(); }

void Watchdog::free_window() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Skip once broken (a peer may be dead) and after MPI_Finalize (which
  // freed the window).
  if (finalized || !broken_.empty()) return;
  // MPI_Win_free is collective over the host: wait (watched) until every
  // local peer is destroying this communicator too.
  MPI_Request req;
  if (MPI_Ibarrier(node_comm_, &req) != MPI_SUCCESS) return;
  try {
    // Liveness only (kAnyPeer): peers' descriptors still show their last op.
    policy_.timeout = std::min(policy_.timeout, std::chrono::milliseconds(10'000));
    poll(
        [&] {
          int done = 0;
          MPI_Test(&req, &done, MPI_STATUS_IGNORE);
          return done != 0;
        },
        "destroying the communicator", kAnyPeer);
  } catch (const std::exception&) {
    return;  // a peer died or never came: leave the window to MPI_Finalize
  }
  MPI_Win_free(&window_);
  MPI_Comm_free(&node_comm_);
}

void Watchdog::check_usable() const {
  if (!broken_.empty())
    throw Aborted("this MPI communicator was aborted by an earlier error (" + broken_ +
                  "); MPI cannot cancel the collective that failed, so create no more work on it "
                  "and exit");
}

void Watchdog::begin(const kit::OpDesc& desc) {
  check_usable();
  current_ = desc;
  Slot& s = *slots_[rank_];
  ++seq_;
  kit::PackedDesc words = kit::pack(desc);
  s.desc0[seq_ & 1].store(words[0], std::memory_order_relaxed);
  s.desc1[seq_ & 1].store(words[1], std::memory_order_relaxed);
  s.seq.store(seq_, std::memory_order_release);
}

void Watchdog::wait(MPI_Request& req, std::string_view what, int peer, MPI_Status* status) {
  poll(
      [&] {
        int done = 0;
        check(MPI_Test(&req, &done, status ? status : MPI_STATUS_IGNORE), what);
        return done != 0;
      },
      what, peer);
}

void Watchdog::probe(int src, std::string_view what, MPI_Message* message, MPI_Status* status) {
  poll(
      [&] {
        int found = 0;
        check(MPI_Improbe(src, MPI_ANY_TAG, comm_, &found, message, status), what);
        return found != 0;
      },
      what, src);
}

void Watchdog::poll(const std::function<bool()>& done, std::string_view what, int peer) {
  if (done()) return;
  auto start = Clock::now();
  auto now = start;
  auto next_check = start + kCheckEvery;
  kit::WaitWarnings warnings(policy_.warning);
  for (;;) {
    for (int i = 0; i < 16; ++i)
      if (done()) return;
    now = Clock::now();
    auto waited = now - start;
    if (waited > policy_.spin) {
      if (waited < kYieldFor)
        sched_yield();
      else
        std::this_thread::sleep_for(kSleep);
    }
    if (now < next_check) continue;
    next_check = now + kCheckEvery;
    check_peers(what, peer);
    double seconds = std::chrono::duration<double>(waited).count();
    if (waited > policy_.timeout) fail_timeout(what, peer, seconds);
    if (warnings.due(std::chrono::duration_cast<std::chrono::milliseconds>(waited))) {
      log(LogLevel::kWarning, "{}: rank {} waiting {:.0f} s (peers alive); fails after {} s", what,
          rank_, seconds, policy_.timeout.count() / 1000);
    }
  }
}

uint64_t Watchdog::peer_seq(int r) const { return slots_[r]->seq.load(std::memory_order_acquire); }

// Seqlock read: valid only if the peer stayed at `seq` throughout.
bool Watchdog::peer_desc(int r, uint64_t seq, kit::OpDesc* out) const {
  const Slot& s = *slots_[r];
  if (s.seq.load(std::memory_order_acquire) != seq) return false;
  uint64_t w0 = s.desc0[seq & 1].load(std::memory_order_relaxed);
  uint64_t w1 = s.desc1[seq & 1].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.seq.load(std::memory_order_relaxed) != seq) return false;
  *out = kit::unpack({w0, w1});
  return true;
}

void Watchdog::check_peers(std::string_view what, int peer) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (peer >= 0 && r != peer)) continue;
    if (!liveness_.alive(r)) {
      std::string msg = fmt::format(
          "{}: rank {} (pid {}) died; rank {} cannot complete the operation. The MPI job cannot "
          "recover: restart it",
          what, r, liveness_.pid(r), rank_);
      fail(msg);
      throw PeerFailure(r, msg);
    }
  }
  if (peer != -1) return;  // point-to-point or teardown: no collective descriptor
  for (int r = 0; r < size_; ++r) {
    kit::OpDesc theirs;
    if (r == rank_ || !slots_[r] || !peer_desc(r, seq_, &theirs) || theirs == current_) continue;
    std::string msg = fmt::format(
        "ranks called different collectives: rank {}: {}; rank {}: {}. The MPI communicator "
        "cannot recover from a mismatch once posted (set LOCKSTEP_VERIFY_OPS=1 to detect it "
        "before posting)",
        rank_, kit::describe(current_), r, kit::describe(theirs));
    fail(msg);
    throw MismatchError(msg);
  }
}

void Watchdog::fail_timeout(std::string_view what, int peer, double waited_s) {
  std::string behind;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !slots_[r] || (peer >= 0 && r != peer)) continue;
    if (peer >= 0 || peer_seq(r) < seq_) behind += fmt::format(" rank {},", r);
  }
  std::string who;
  if (peer >= 0)
    who = fmt::format("rank {}, which is alive,", peer);
  else if (!behind.empty())
    who = "alive" + behind.substr(0, behind.size() - 1) + ", which";
  else
    who = "ranks on other hosts (this host's ranks all joined), which";
  std::string msg = fmt::format(
      "{}: rank {} waited {:.1f} s for {} did not complete the operation (LOCKSTEP_TIMEOUT={} s). "
      "Check that every rank calls the same collectives.",
      what, rank_, waited_s, who, policy_.timeout.count() / 1000.0);
  fail(msg);
  throw TimeoutError(msg);
}

void Watchdog::fail(const std::string& reason) {
  broken_ = reason;
  mark_broken(reason);
}

}  // namespace lockstep::comm::mpi
