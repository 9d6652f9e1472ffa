#include "lockstep/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::optim {
namespace {

void require(bool ok, std::string_view what) {
  if (!ok) throw InvalidArgument(std::string("lr schedule: ") + std::string(what));
}

void require_lr(double lr, std::string_view name) {
  require(std::isfinite(lr) && lr >= 0, fmt::format("{} must be finite and >= 0", name));
}

// A schedule from a closed-form function; the lambda captures validated values.
template <typename F>
Schedule make(F f) {
  struct Impl final : LrSchedule {
    explicit Impl(F fn) : fn(std::move(fn)) {}
    double lr_at(int64_t t) const override { return fn(std::max<int64_t>(t, 0)); }
    F fn;
  };
  return std::make_shared<const Impl>(std::move(f));
}

}  // namespace

ScalingRule parse_scaling_rule(std::string_view name) {
  if (name == "none") return ScalingRule::kNone;
  if (name == "linear") return ScalingRule::kLinear;
  if (name == "sqrt") return ScalingRule::kSqrt;
  throw InvalidArgument(fmt::format("lr scaling rule '{}': use none, linear or sqrt", name));
}

double scaled_lr(double base_lr, ScalingRule rule, int64_t global_batch, int64_t reference_batch) {
  require_lr(base_lr, "base lr");
  require(global_batch > 0 && reference_batch > 0, "batch sizes must be positive");
  double k = static_cast<double>(global_batch) / static_cast<double>(reference_batch);
  switch (rule) {
    case ScalingRule::kNone: return base_lr;
    case ScalingRule::kLinear: return base_lr * k;
    case ScalingRule::kSqrt: return base_lr * std::sqrt(k);
  }
  return base_lr;
}

Schedule constant(double lr) {
  require_lr(lr, "lr");
  return make([lr](int64_t) { return lr; });
}

Schedule step_decay(double lr, int64_t step_iters, double gamma) {
  require_lr(lr, "lr");
  require(step_iters > 0, "step_iters must be > 0");
  require(gamma > 0, "gamma must be > 0");
  return make([=](int64_t t) { return lr * std::pow(gamma, static_cast<double>(t / step_iters)); });
}

Schedule multi_step(double lr, std::vector<int64_t> milestones, double gamma) {
  require_lr(lr, "lr");
  require(gamma > 0, "gamma must be > 0");
  require(!milestones.empty(), "multi_step needs at least one milestone");
  for (size_t i = 0; i < milestones.size(); ++i)
    require(milestones[i] >= 1 && (i == 0 || milestones[i] > milestones[i - 1]),
            fmt::format("multi_step milestones must be >= 1 and strictly increasing; "
                        "milestone {} is {}",
                        i, milestones[i]));
  return make([=, m = std::move(milestones)](int64_t t) {
    auto passed = std::upper_bound(m.begin(), m.end(), t) - m.begin();
    return lr * std::pow(gamma, static_cast<double>(passed));
  });
}

Schedule exponential_decay(double lr, double gamma) {
  require_lr(lr, "lr");
  require(gamma > 0, "gamma must be > 0");
  return make([=](int64_t t) { return lr * std::pow(gamma, static_cast<double>(t)); });
}

Schedule polynomial_decay(double lr, int64_t total_iters, double power, double end_lr) {
  require_lr(lr, "lr");
  require_lr(end_lr, "end lr");
  require(total_iters > 0, "total_iters must be > 0");
  require(power > 0, "power must be > 0");
  return make([=](int64_t t) {
    if (t >= total_iters) return end_lr;
    double left = 1.0 - static_cast<double>(t) / static_cast<double>(total_iters);
    return end_lr + (lr - end_lr) * std::pow(left, power);
  });
}

Schedule cosine_decay(double lr, int64_t total_iters, double end_lr) {
  require_lr(lr, "lr");
  require_lr(end_lr, "end lr");
  require(total_iters > 0, "total_iters must be > 0");
  return make([=](int64_t t) {
    if (t >= total_iters) return end_lr;
    double phase = std::numbers::pi * static_cast<double>(t) / static_cast<double>(total_iters);
    return end_lr + (lr - end_lr) * (1.0 + std::cos(phase)) / 2.0;
  });
}

Schedule warmup(double start_lr, int64_t warmup_iters, Schedule after) {
  require_lr(start_lr, "warmup start lr");
  require(warmup_iters >= 0, "warmup_iters must be >= 0");
  require(after != nullptr, "warmup needs the schedule that follows it");
  return make([=](int64_t t) {
    if (t >= warmup_iters) return after->lr_at(t - warmup_iters);
    double target = after->lr_at(0);
    return start_lr +
           (target - start_lr) * static_cast<double>(t) / static_cast<double>(warmup_iters);
  });
}

Schedule product(Schedule a, Schedule b) {
  require(a != nullptr && b != nullptr, "product needs two schedules");
  return make([=](int64_t t) { return a->lr_at(t) * b->lr_at(t); });
}

Schedule one_cycle(double max_lr, int64_t total_iters, OneCycleOptions o) {
  require_lr(max_lr, "max lr");
  require(total_iters > 0, "total_iters must be > 0");
  require(o.pct_start >= 0 && o.pct_start <= 1, "one-cycle pct_start must be in [0, 1]");
  require(o.div_factor >= 1, "one-cycle div_factor must be >= 1");
  require(o.final_div_factor >= 1, "one-cycle final_div_factor must be >= 1");
  const double start = max_lr / o.div_factor, end = start / o.final_div_factor;
  const double peak_at = o.pct_start * static_cast<double>(total_iters);
  // From `from` to `to` as `x` goes from 0 to 1.
  auto anneal = [cosine = o.cosine](double from, double to, double x) {
    const double w = cosine ? (1.0 - std::cos(std::numbers::pi * x)) / 2.0 : x;
    return from + (to - from) * w;
  };
  return make([=](int64_t t) {
    const auto x = static_cast<double>(std::min(t, total_iters));
    if (x < peak_at) return anneal(start, max_lr, x / peak_at);
    const double down = static_cast<double>(total_iters) - peak_at;
    return down > 0 ? anneal(max_lr, end, (x - peak_at) / down) : max_lr;  // pct_start 1: all ramp
  });
}

void BatchSizeSchedule::validate() const {
  require(initial > 0, "batch schedule: initial batch must be > 0");
  require(factor >= 1, "batch schedule: factor must be >= 1");
  require(every_epochs > 0, "batch schedule: every_epochs must be > 0");
  require(max_batch >= initial, "batch schedule: max_batch must be >= initial");
}

int64_t BatchSizeSchedule::batch_at(int64_t epoch) const {
  validate();
  double b = static_cast<double>(initial) *
             std::pow(factor, static_cast<double>(std::max<int64_t>(epoch, 0) / every_epochs));
  return std::min<int64_t>(max_batch, static_cast<int64_t>(std::llround(b)));
}

}  // namespace lockstep::optim
