#include "comm/kit/wait_policy.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "lockstep/base/knobs.h"

namespace lockstep::comm::kit {
namespace {

std::chrono::milliseconds seconds_knob(const char* name) {
  return std::chrono::milliseconds(static_cast<int64_t>(knob_double(name) * 1000));
}

}  // namespace

WaitPolicy WaitPolicy::from_knobs(int ranks_on_host) {
  WaitPolicy p;
  p.timeout = seconds_knob("LOCKSTEP_TIMEOUT");
  p.warning = seconds_knob("LOCKSTEP_WAIT_WARNING");
  if (knob_string("LOCKSTEP_SPIN_US") == "auto") {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p.spin = ranks_on_host > cores ? std::chrono::microseconds(0) : std::chrono::microseconds(50);
  } else {
    p.spin = std::chrono::microseconds(std::max<int64_t>(0, knob_int("LOCKSTEP_SPIN_US")));
  }
  // 40 x: covers the median skew between two ranks' hand-offs (0.2-0.7 ms
  // on the held-out program) with room (docs/performance.md).
  if (knob_string("LOCKSTEP_IDLE_SPIN_US") == "auto")
    p.idle_spin = 40 * p.spin;
  else
    p.idle_spin =
        std::chrono::microseconds(std::max<int64_t>(0, knob_int("LOCKSTEP_IDLE_SPIN_US")));
  return p;
}

bool WaitWarnings::due(std::chrono::milliseconds waited) {
  if (next_.count() <= 0 || waited < next_) return false;
  while (next_ <= waited) next_ *= 2;
  return true;
}

}  // namespace lockstep::comm::kit
