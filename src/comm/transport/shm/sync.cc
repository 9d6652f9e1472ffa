#include "comm/transport/shm/sync.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_PAUSE() _mm_pause()
#else
#define LOCKSTEP_PAUSE() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace lockstep::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;

bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds max) {
  timespec ts{static_cast<time_t>(max.count() / 1000),
              static_cast<long>((max.count() % 1000) * 1'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// How often a sleeping waiter re-checks peers: bounds dead-peer detection.
constexpr auto kSleepSlice = std::chrono::milliseconds(10);
constexpr auto kLivenessEvery = std::chrono::milliseconds(20);
constexpr auto kSpinFloor = std::chrono::nanoseconds(2'000);
constexpr auto kSpinStep = std::chrono::nanoseconds(500);

}  // namespace

void publish(WaitWord& word, uint32_t value) {
  // Every flag word (a rank's step counter, a channel's sent and acked
  // counts) has one writer and advances by one per publication, so a
  // reader's target is always "what I saw + k"; a jump means a second
  // writer or a skipped step (Note [Shared-memory protocol]).
  LOCKSTEP_DCHECK(value == word.value.load(std::memory_order_relaxed) + 1,
                  "shm flag word: publishing {} over {}; a flag has one writer and advances by one",
                  value, word.value.load(std::memory_order_relaxed));
  word.value.store(value, std::memory_order_seq_cst);
  if (word.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&word.value);
}

namespace {

std::vector<int> peer_pids(Segment& segment, int size) {
  std::vector<int> pids(size);
  for (int r = 0; r < size; ++r) pids[r] = segment.rank_line(r).pid.load();
  return pids;
}

}  // namespace

Waiter::Waiter(Segment& segment, int rank, int size, kit::WaitPolicy policy)
    : segment_(segment),
      rank_(rank),
      size_(size),
      policy_(policy),
      liveness_(peer_pids(segment, size), rank),
      spin_budget_(policy.spin) {}

Waiter::~Waiter() = default;

bool Waiter::peer_alive(int r) {
  if (segment_.rank_line(r).state.load(std::memory_order_seq_cst) == kLeft) return false;
  return liveness_.alive(r);
}

int Waiter::find_dead_peer() {
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && !peer_alive(r)) return r;
  return -1;
}

void Waiter::check_abort() {
  Header& h = segment_.header();
  int who = h.abort_rank.load(std::memory_order_acquire);
  if (who < 0 || (who == rank_ && aborted_by_me_)) {
    if (who == rank_) throw Aborted("this communicator was aborted by an earlier error");
    return;
  }
  auto until = Clock::now() + std::chrono::milliseconds(200);
  while (h.abort_posted.load(std::memory_order_acquire) == 0 && Clock::now() < until)
    std::this_thread::yield();
  std::string reason(h.abort_reason, strnlen(h.abort_reason, sizeof h.abort_reason));
  // A death is reported as such on every survivor, not as a secondary abort,
  // but in the words of the rank that noticed it: say so.
  if (h.abort_posted.load() && h.abort_dead_rank >= 0)
    throw PeerFailure(h.abort_dead_rank,
                      fmt::format("{} (relayed to rank {} from rank {}, which noticed first)",
                                  reason, rank_, who));
  throw Aborted(fmt::format("rank {} aborted the job's collectives: {}", who, reason));
}

void Waiter::abort(const std::string& reason, int dead_rank) {
  Header& h = segment_.header();
  int expected = -1;
  if (!h.abort_rank.compare_exchange_strong(expected, rank_)) return;
  aborted_by_me_ = true;
  size_t n = std::min(reason.size(), sizeof h.abort_reason - 1);
  std::memcpy(h.abort_reason, reason.data(), n);
  h.abort_reason[n] = '\0';
  h.abort_dead_rank = dead_rank;
  h.abort_posted.store(1, std::memory_order_release);
  // Wake every sleeper so peers notice now rather than at their next slice.
  for (int r = 0; r < size_; ++r) futex_wake_all(&segment_.rank_line(r).step.value);
}

void Waiter::fail_dead(int peer, std::string_view what) {
  bool left = segment_.rank_line(peer).state.load() == kLeft;
  std::string msg =
      left ? fmt::format(
                 "{}: rank {} (pid {}) shut down its communicator while rank {} waited "
                 "for it: it failed (see its own error) or ranks called different "
                 "collectives",
                 what, peer, liveness_.pid(peer), rank_)
           : fmt::format("{}: rank {} (pid {}) died; rank {} cannot complete the collective", what,
                         peer, liveness_.pid(peer), rank_);
  abort(msg, peer);
  throw PeerFailure(peer, msg);
}

void Waiter::sleep_once(WaitWord& word, uint32_t target) {
  word.sleepers.fetch_add(1, std::memory_order_seq_cst);
  uint32_t seen = word.value.load(std::memory_order_seq_cst);
  if (!reached(seen, target)) futex_wait(&word.value, seen, kSleepSlice);
  word.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

// Note [Two spin budgets]
// Spinning pays only while the peer runs on another core. Like an adaptive
// mutex, the arrival budget halves each time a spin ends without the word
// moving (peer descheduled, sharing our core, or busy computing) and grows
// back while spins succeed, so an oversubscribed or loaded host degrades to
// futex sleeps instead of burning the peer's time slice.
// Waits within a call are different: every rank has reached the collective,
// so the peer is copying or reducing a chunk and publishes within
// microseconds. Training shrank the shared budget to its 2 µs floor (each
// step's first wait is for a peer still computing its backward pass), and
// every later step of the gradient allreduce then slept on the futex and
// paid a cross-core wake-up (~25-50 µs on this VM): a 0.88 MB allreduce took
// 256 µs in training against ~100 µs in the benchmark. Within-call waits
// get a fixed spin of kWithinCallSpins policy spins and leave the arrival
// budget alone. So does an arrival within kRecent of the end of the last
// wait that had to wait (a word already reached returns before reading the
// clock, to keep the latency path free of it): the engine's gradient
// allreduce follows its negotiation by the ~80 µs of the fusion copy, so the
// peer is coming, not computing.
constexpr int kWithinCallSpins = 4;
constexpr auto kRecent = std::chrono::milliseconds(1);

bool Waiter::spin_once(WaitWord& word, uint32_t target, Clock::time_point start, Phase phase) {
  const bool arrival = phase == Phase::kArrival && start - last_return_ > kRecent;
  auto spin_until = start + (arrival ? spin_budget_ : kWithinCallSpins * policy_.spin);
  while (Clock::now() < spin_until) {
    for (int i = 0; i < 64; ++i) {
      LOCKSTEP_PAUSE();
      if (reached(word.value.load(std::memory_order_acquire), target)) {
        if (arrival) spin_budget_ = std::min(policy_.spin, 2 * spin_budget_ + kSpinStep);
        return true;
      }
    }
  }
  if (arrival) spin_budget_ = std::max(std::min(policy_.spin, kSpinFloor), spin_budget_ / 2);
  return false;
}

// Note [Spinning while the caller is blocked]
// In a synchronous training step the rank that hands its gradients over
// first waits in the engine's negotiation for the slower rank, and its
// training thread is blocked on the result: its core has nothing else to
// run. Sleeping there made the slower rank's arrival pay a cross-core futex
// wake-up (25-50 us on this VM) on the step's critical path, and again in
// the gradient allreduce when the slower rank's spin budget had shrunk. So
// when the engine says (Backend::set_idle_probe) that a thread of this
// process is blocked on its results, a wait the spin budget did not satisfy
// spins on, up to LOCKSTEP_IDLE_SPIN_US from the start of the wait (auto:
// 40 x LOCKSTEP_SPIN_US, 2 ms at the default 50 us; nothing when
// LOCKSTEP_SPIN_US=0, i.e. more ranks than cores). The engine
// thread shares its core with the training thread, which may not have
// reached its wait yet when the engine starts the cycle (a woken thread
// preempts the one that woke it): one sched_yield lets it get there first.
// The probe is re-read while spinning, so the spin ends when the caller
// stops waiting.
bool Waiter::spin_while_idle(WaitWord& word, uint32_t target, Clock::time_point start) {
  if (!idle_probe_ || policy_.idle_spin <= policy_.spin) return false;
  if (idle_probe_->load(std::memory_order_relaxed) == 0) {
    sched_yield();
    if (reached(word.value.load(std::memory_order_acquire), target)) return true;
  }
  const auto spin_until = start + policy_.idle_spin;
  while (idle_probe_->load(std::memory_order_relaxed) > 0 && Clock::now() < spin_until) {
    for (int i = 0; i < 64; ++i) {
      LOCKSTEP_PAUSE();
      if (reached(word.value.load(std::memory_order_acquire), target)) return true;
    }
  }
  return false;
}

// A dissemination step (Note [Dissemination steps] in shm_backend.cc)
// waits on a partner that may itself wait on the rank that has not joined:
// name the rank whose step counter is furthest behind instead.
int Waiter::behind(const WaitWord& word, uint32_t target, int peer) {
  if (&word != &segment_.rank_line(peer).step) return peer;  // a point-to-point channel
  int worst = peer;
  int32_t worst_lag = static_cast<int32_t>(target - word.value.load());
  for (int r = 0; r < size_; ++r) {
    int32_t lag = static_cast<int32_t>(target - segment_.rank_line(r).step.value.load());
    if (r != rank_ && lag > worst_lag) worst = r, worst_lag = lag;
  }
  return worst;
}

void Waiter::wait(WaitWord& word, uint32_t target, int peer, std::string_view what, Phase phase) {
  if (reached(word.value.load(std::memory_order_acquire), target)) return;
  auto start = Clock::now();
  struct Stamp {  // last_return_ on every way out, exceptions included
    Clock::time_point& at;
    ~Stamp() { at = Clock::now(); }
  } stamp{last_return_};
  if (spin_once(word, target, start, phase)) return;
  if (spin_while_idle(word, target, start)) return;
  auto next_liveness = Clock::now();
  kit::WaitWarnings warnings(policy_.warning);
  for (;;) {
    if (reached(word.value.load(std::memory_order_acquire), target)) return;
    check_abort();
    auto now = Clock::now();
    if (now >= next_liveness) {
      // Only the peer we wait on matters: a peer that published its part and
      // then exited is fine, and a rank stuck behind a dead peer learns of it
      // through that peer's waiter aborting the job. Re-read the word after
      // seeing the exit, since the peer may have published just before it.
      if (!peer_alive(peer) && !reached(word.value.load(std::memory_order_seq_cst), target))
        fail_dead(peer, what);
      next_liveness = now + kLivenessEvery;
    }
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    if (waited > policy_.timeout) {
      std::string msg = fmt::format(
          "{}: rank {} waited {:.1f} s for rank {}, which is alive but has not joined "
          "(LOCKSTEP_TIMEOUT={} s). Check that every rank calls the same collectives.",
          what, rank_, waited.count() / 1000.0, behind(word, target, peer),
          policy_.timeout.count() / 1000.0);
      abort(msg);
      throw TimeoutError(msg);
    }
    if (warnings.due(waited)) {
      log(LogLevel::kWarning, "{}: waiting {:.0f} s for rank {} (alive); will fail after {} s",
          what, waited.count() / 1000.0, behind(word, target, peer),
          policy_.timeout.count() / 1000);
    }
    sleep_once(word, target);
  }
}

}  // namespace lockstep::comm::shm
