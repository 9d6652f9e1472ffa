// How every transport waits on a live peer: one policy, read from the knob
// table, and one schedule of "still waiting" warnings.
//
// LOCKSTEP_TIMEOUT: a wait on a live peer fails after this long
//   (TimeoutError); dead peers are found by liveness (liveness.h) long before.
// LOCKSTEP_WAIT_WARNING: the first "waiting N s for rank R (alive)"
//   warning; it repeats at doubling intervals (10, 20, 40, 80 s... by
//   default), so a long wait stays visible without flooding the log.
// LOCKSTEP_SPIN_US: how long to busy-wait before sleeping (shm) or yielding
//   (mpi). auto = 50 us, or 0 when this host runs more ranks than it has
//   cores: a spinning waiter would steal the time slice of the very peer it
//   waits for. The same meaning for every transport.
// LOCKSTEP_IDLE_SPIN_US: how long a wait may keep spinning while the caller
//   says its process is blocked on the result (Backend::set_idle_probe).
//   auto = 40 x the spin above (2 ms; 0 when that is 0).
// Value types; not shared between threads.
#pragma once

#include <chrono>

namespace lockstep::comm::kit {

struct WaitPolicy {
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds warning{0};
  std::chrono::nanoseconds spin{0};
  std::chrono::nanoseconds idle_spin{0};

  // From the knobs above; `ranks_on_host` decides LOCKSTEP_SPIN_US=auto.
  // Throws InvalidArgument naming the knob for a value that does not parse.
  static WaitPolicy from_knobs(int ranks_on_host);
};

// Decides when a long wait logs: first at `first`, then each time the wait
// has doubled. Create one per wait.
class WaitWarnings {
 public:
  explicit WaitWarnings(std::chrono::milliseconds first) : next_(first) {}
  // True when `waited` has passed the next warning point (then moves it).
  bool due(std::chrono::milliseconds waited);

 private:
  std::chrono::milliseconds next_;
};

}  // namespace lockstep::comm::kit
