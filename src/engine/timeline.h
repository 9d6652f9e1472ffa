// Timeline: a Chrome-trace (chrome://tracing, Perfetto) JSON file of what the
// engine did to each tensor: NEGOTIATE, WAIT_FOR_DATA, FUSE_COPY_IN,
// COLLECTIVE, COPY_OUT, plus an instant marker per fused batch and, when
// asked (start(path, true)), a global CYCLE_START instant event per
// negotiation cycle as Horovod's mark_cycles writes.
//
// Producers (background threads) push fixed-size events into a bounded queue
// and never do I/O; a dedicated writer thread formats and writes them. When
// the queue is full, events are dropped and counted (the count is written at
// the end) rather than stalling a collective. The file is `[` followed by
// events each ending in ",\n", written in whole lines, so a killed process
// leaves a trace Chrome still loads; stop() closes the array properly.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "lockstep/base/mutex.h"

namespace lockstep::engine::detail {

enum class Phase : uint8_t {
  kNegotiate,
  kWaitForData,
  kFuseCopyIn,
  kCollective,
  kCopyOut,
  kMarker,
  kCycleStart
};
const char* phase_name(Phase phase);

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kQueueCapacity = 1 << 16;
  // The writer wakes for a full batch or on this period, never per event: a
  // wake-up per event (~800 per ResNet-50 step) cost ~10% of the step on two
  // busy cores; batching brought it to the noise.
  static constexpr size_t kWakeBatch = 4096;
  static constexpr std::chrono::milliseconds kFlushPeriod{100};

  Timeline() = default;
  ~Timeline() { stop(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens (truncates) `path`; throws InvalidArgument when it cannot. A running
  // timeline is stopped first. mark_cycles: record mark_cycle() calls.
  void start(const std::string& path, bool mark_cycles = false);
  // Drains the queue, closes the JSON array and the file. Idempotent.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool marks_cycles() const { return active() && mark_cycles_.load(std::memory_order_relaxed); }
  // A CYCLE_START event now for process set `set`, when marks_cycles().
  void mark_cycle(int set);

  // `tensor` names the row; `detail` is shown as an argument (markers: the
  // batch; other phases: the algorithm, when the transport names one).
  void record(const std::string& tensor, Phase phase, Clock::time_point begin,
              Clock::time_point end, std::string detail = {});

 private:
  struct Event {
    std::string tensor;
    std::string detail;
    Phase phase;
    Clock::time_point begin, end;
  };
  void stop_locked() LOCKSTEP_REQUIRES(control_mu_);
  void writer_loop();
  std::string format(const Event& e);

  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  Mutex control_mu_;  // serializes start/stop
  Mutex mu_;
  std::condition_variable cv_;  // a batch is ready or stopping_
  std::deque<Event> queue_ LOCKSTEP_GUARDED_BY(mu_);
  bool stopping_ LOCKSTEP_GUARDED_BY(mu_) = false;
  uint64_t dropped_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  int fd_ LOCKSTEP_GUARDED_BY(mu_) = -1;
  // Set by start() before the writer starts, read by the writer only.
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
  std::thread writer_ LOCKSTEP_GUARDED_BY(control_mu_);
};

}  // namespace lockstep::engine::detail
