// Learning-rate rules and schedules for large-batch training.
//
// Every schedule is a pure function of the iteration (closed form, no hidden
// state), so a resumed or re-formed job recomputes the same value from its
// step counter alone, and every rank agrees without communicating.
// Schedules are immutable values shared through std::shared_ptr; all member
// functions are thread-safe. Invalid parameters throw lockstep::InvalidArgument
// naming the parameter.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace lockstep::optim {

// How the learning rate grows with the global batch (Goyal et al. 1706.02677
// use linear; sqrt keeps the gradient-noise scale, Krizhevsky 1404.5997).
enum class ScalingRule { kNone, kLinear, kSqrt };
ScalingRule parse_scaling_rule(std::string_view name);  // "none" | "linear" | "sqrt"

// base_lr * k (linear) or base_lr * sqrt(k) (sqrt), k = global / reference.
double scaled_lr(double base_lr, ScalingRule rule, int64_t global_batch, int64_t reference_batch);

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr_at(int64_t iteration) const = 0;
};
using Schedule = std::shared_ptr<const LrSchedule>;

Schedule constant(double lr);
// lr * gamma^floor(t / step_iters)
Schedule step_decay(double lr, int64_t step_iters, double gamma);
// Piecewise constant (PyTorch's MultiStepLR, the ResNet recipe "divide by 10
// at epochs 30, 60 and 80"): lr * gamma^(number of milestones <= t).
// Milestones strictly increasing and >= 1; t is in the milestones' unit
// (pass the epoch for epoch milestones).
Schedule multi_step(double lr, std::vector<int64_t> milestones, double gamma);
// lr * gamma^t
Schedule exponential_decay(double lr, double gamma);
// end_lr + (lr - end_lr) * (1 - t/total)^power, then end_lr (LARS: power 2)
Schedule polynomial_decay(double lr, int64_t total_iters, double power, double end_lr = 0);
// end_lr + (lr - end_lr) * (1 + cos(pi t / total)) / 2, then end_lr
Schedule cosine_decay(double lr, int64_t total_iters, double end_lr = 0);
// Gradual warmup (Goyal et al.): linear from start_lr at t = 0 to
// after->lr_at(0) at t = warmup_iters, then after->lr_at(t - warmup_iters).
// Counted from t = 0: the first step gets start_lr. Horovod's examples count
// from batch_idx + 1 (epoch + (batch_idx + 1) / batches), so their first step
// is already one step into the ramp; pass t + 1 to reproduce them.
Schedule warmup(double start_lr, int64_t warmup_iters, Schedule after);
// a(t) * b(t): e.g. a decay chain on top of another.
Schedule product(Schedule a, Schedule b);

// One-cycle (Smith & Topin 1708.07120; PyTorch's OneCycleLR, two phases):
// from max_lr / div_factor up to max_lr over the first pct_start of
// total_iters, then down to max_lr / (div_factor * final_div_factor) at
// total_iters and after; each leg a half cosine (or a straight line).
struct OneCycleOptions {
  double pct_start = 0.25;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool cosine = true;
};
Schedule one_cycle(double max_lr, int64_t total_iters, OneCycleOptions options = {});

// "Don't decay the learning rate, increase the batch size" (Smith et al.
// 1711.00489): the per-rank batch at an epoch, multiplied by `factor` every
// `every_epochs` epochs up to `max_batch`. The data sampler asks this
// schedule for its batch size at each epoch.
struct BatchSizeSchedule {
  int64_t initial = 64;
  double factor = 2;
  int64_t every_epochs = 10;
  int64_t max_batch = 1 << 20;
  int64_t batch_at(int64_t epoch) const;
  void validate() const;
};

// Optimizer switching ("ImageNet in 15 minutes", RMSProp then SGD): which of
// two optimizers is active at an epoch.
struct OptimizerSwitch {
  int64_t switch_epoch = 0;
  bool second_active(int64_t epoch) const { return epoch >= switch_epoch; }
};

}  // namespace lockstep::optim
