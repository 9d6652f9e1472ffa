#include "fashion_mnist/target.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace lockstep::examples {
namespace {

// Seconds since this process started: field 22 of /proc/self/stat counts
// clock ticks since boot, the same origin as CLOCK_BOOTTIME. nullopt when
// /proc is not there (then main() is the origin).
std::optional<double> seconds_since_exec() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  timespec now{};
  if (fields.fail() || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
  const double started = std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
  const double elapsed =
      static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) - started;
  if (elapsed < 0 || elapsed > 3600) return std::nullopt;
  return elapsed;
}

}  // namespace

Clock::time_point process_start() {
  static const Clock::time_point start = [] {
    const auto now = Clock::now();
    auto ago = seconds_since_exec().value_or(0.0);
    return now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ago));
  }();
  return start;
}

void TrainingClock::resume() {
  if (!since_) since_ = Clock::now();
}

void TrainingClock::pause() {
  if (!since_) return;
  total_ += std::chrono::duration<double>(Clock::now() - *since_).count();
  since_.reset();
}

double TrainingClock::seconds() const {
  if (!since_) return total_;
  return total_ + std::chrono::duration<double>(Clock::now() - *since_).count();
}

EvalSchedule::EvalSchedule(double interval, double target)
    : interval_(interval), target_(target), next_(interval) {}

bool EvalSchedule::due(double epochs_done) const { return epochs_done + 1e-9 >= next_; }

bool EvalSchedule::record(double epochs_done, double accuracy, const TrainingClock& clock) {
  // The next point is the first multiple of the interval past this one, so an
  // evaluation at an epoch end does not bring on another right after it.
  next_ = interval_ * (std::floor(epochs_done / interval_ + 1e-9) + 1);
  best_ = std::max(best_, accuracy);
  if (target_ <= 0 || result_ || accuracy < target_) return false;
  result_ = TargetResult{clock.seconds(),
                         std::chrono::duration<double>(Clock::now() - process_start()).count(),
                         epochs_done};
  return true;
}

std::string EvalSchedule::summary(int epochs_run) const {
  if (!result_)
    return fmt::format("time to target {:g}: not reached in {} epoch(s) (best {:.2f}%)", target_,
                       epochs_run, 100 * best_);
  return fmt::format("time to target {:g}: {:.2f} s training, {:.2f} s wall, {:.2f} epochs",
                     target_, result_->training_s, result_->wall_s, result_->epochs);
}

}  // namespace lockstep::examples
