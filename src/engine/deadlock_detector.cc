#include "engine/deadlock_detector.h"

namespace lockstep::engine::detail {

bool all_blocked_without_progress(const CycleResult& result) {
  // Not `progressed`: a stall-report cycle's slot lists count as progress.
  if (result.partial.empty() || !result.ready.empty() || result.announced ||
      result.join_completed_last)
    return false;
  for (size_t r = 0; r < result.blocked.size(); ++r)
    if (!result.blocked[r] && !result.joined[r]) return false;
  return !result.blocked.empty();
}

bool DeadlockDetector::observe(const CycleResult& result, Clock::time_point now) {
  if (timeout_s_ <= 0 || result.stall_action == StallAction::kDeadlock ||
      !all_blocked_without_progress(result)) {
    since_.reset();
    return false;
  }
  if (!since_) since_ = now;
  double held = std::chrono::duration<double>(now - *since_).count();
  if (held < timeout_s_) return false;
  reported_after_s_ = held;
  since_.reset();
  return true;
}

}  // namespace lockstep::engine::detail
