#include "launcher/deadlines.h"

namespace lockstep::launcher {

void Deadlines::arm_once(Deadline d, TimePoint at) {
  if (!armed(d)) arm(d, at);
}

bool Deadlines::passed(Deadline d, TimePoint now) const {
  return armed(d) && now >= *at_[index(d)];
}

bool Deadlines::take_due(Deadline d, TimePoint now) {
  if (!passed(d, now)) return false;
  disarm(d);
  return true;
}

std::optional<Deadlines::TimePoint> Deadlines::earliest(
    std::initializer_list<Deadline> kinds) const {
  std::optional<TimePoint> first;
  for (Deadline d : kinds) first = earlier(first, at(d));
  return first;
}

std::optional<Deadlines::TimePoint> earlier(std::optional<Deadlines::TimePoint> a,
                                            std::optional<Deadlines::TimePoint> b) {
  if (!a) return b;
  if (!b) return a;
  return *b < *a ? b : a;
}

int poll_timeout_ms(std::optional<Deadlines::TimePoint> deadline, Deadlines::TimePoint now) {
  if (!deadline) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now).count();
  return ms <= 0 ? 0 : static_cast<int>(ms) + 1;
}

}  // namespace lockstep::launcher
