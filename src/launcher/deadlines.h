// The supervisor's timers, one named kind each, so that its poll loop sleeps
// until the earliest armed one and each escalation step reads as a name, not
// as one of six optional fields. Internal to the launcher. Not thread-safe:
// the supervisor's single poll loop owns it.
#pragma once

#include <array>
#include <chrono>
#include <initializer_list>
#include <optional>

namespace lockstep::launcher {

enum class Deadline {
  kTerm,          // SIGTERM the workers still running (after a failure)
  kKill,          // SIGKILL them (kTerm or a forwarded signal went unheeded)
  kDrain,         // stop reading output once every worker is reaped
  kStartCheck,    // next poll of the store for remote workers' check-ins
  kStartTimeout,  // --start-timeout: give up on remote workers not checked in
  kReform,        // elastic: re-form the job after failures settle
};
inline constexpr int kDeadlineKinds = 6;

class Deadlines {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  void arm(Deadline d, TimePoint at) { at_[index(d)] = at; }
  // Arms `d` only if it is not armed yet: an earlier escalation keeps its time.
  void arm_once(Deadline d, TimePoint at);
  void disarm(Deadline d) { at_[index(d)].reset(); }
  bool armed(Deadline d) const { return at_[index(d)].has_value(); }
  std::optional<TimePoint> at(Deadline d) const { return at_[index(d)]; }
  // Armed and reached at `now`.
  bool passed(Deadline d, TimePoint now) const;
  // Like passed(), and disarms `d` when it returns true: each expiry acts once.
  bool take_due(Deadline d, TimePoint now);
  // The earliest armed time among `kinds`; nullopt if none is armed.
  std::optional<TimePoint> earliest(std::initializer_list<Deadline> kinds) const;

 private:
  static int index(Deadline d) { return static_cast<int>(d); }
  std::array<std::optional<TimePoint>, kDeadlineKinds> at_;
};

// The earlier of two optional times (an unset one never wins).
std::optional<Deadlines::TimePoint> earlier(std::optional<Deadlines::TimePoint> a,
                                            std::optional<Deadlines::TimePoint> b);

// poll(2)'s timeout for waking at `deadline`: -1 (block) without one, 0 once
// less than a whole millisecond is left, else the whole milliseconds left
// plus one, so that a full sleep never wakes before the deadline.
int poll_timeout_ms(std::optional<Deadlines::TimePoint> deadline, Deadlines::TimePoint now);

}  // namespace lockstep::launcher
