// LARC: layer-wise adaptive rate control around any torch::optim::Optimizer,
// following NVIDIA apex (apex/parallel/LARC.py).
//
// Before each inner step, for every parameter p with gradient g in a group
// with learning rate lr and weight decay wd:
//   a = η‖p‖ / (‖g‖ + wd‖p‖ + ε)
//   clip mode:  a ← min(a/lr, 1)     (the effective rate is min(η‖p‖/…, lr))
//   scale mode: a as is              (the effective rate is lr·a)
//   g ← (g + wd·p)·a                 (skipped, g left as is, when ‖p‖ = 0 or ‖g‖ = 0)
// then the inner optimizer steps with every group's weight_decay set to 0
// (restored afterwards, also when the step throws), so the decay is applied
// once, inside the adapted gradient. As in apex, a
// skipped tensor gets no decay that step. LARC rewrites p.grad() in place.
//
// Larc is itself a torch::optim::Optimizer, so it can be given to
// DistributedOptimizer, ElasticState, apply_schedule and torch::save. Its
// param_groups() are the truth: the inner optimizer's groups are refreshed
// from them (parameters and options) before every inner step,
// so set rates on the Larc, not on the inner optimizer. Optimizer state
// (momentum, ...) lives in the inner optimizer; save/load delegate to it.
//
// The weight decay is read from the group options of torch::optim::{SGD,
// Adam, AdamW, RMSprop, Adagrad} and lockstep's Lars, Lamb and NovoGrad
// (group_weight_decay). Any other optimizer is refused at construction and
// at step (naming its options type) unless LarcOptions gives
// weight_decay_of/set_weight_decay: LARC never guesses a decay of 0. For
// the decoupled decays (AdamW, Lamb) this turns the decay into an L2 term
// inside the gradient, as apex does.
//
// Not thread-safe; shares the inner optimizer (by shared_ptr) with the caller.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <memory>
#include <optional>

namespace lockstep::optim {

struct LarcOptions {
  double trust_coefficient = 0.02;  // η, apex's default
  bool clip = true;
  double eps = 1e-8;
  // For an inner optimizer whose options type LARC does not know: how to
  // read and set a group's weight decay (both or neither). An optimizer
  // without weight decay passes a reader returning 0 and a no-op setter.
  std::function<double(const ::torch::optim::OptimizerOptions&)> weight_decay_of = nullptr;
  std::function<void(::torch::optim::OptimizerOptions&, double)> set_weight_decay = nullptr;
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

// The weight decay of a group's options, if its type is one LARC knows.
std::optional<double> group_weight_decay(const ::torch::optim::OptimizerOptions& options);

class Larc : public ::torch::optim::Optimizer {
 public:
  // Throws lockstep::InvalidArgument for a null optimizer, bad options, or an
  // inner optimizer whose weight decay LARC cannot read (see above).
  explicit Larc(std::shared_ptr<::torch::optim::Optimizer> inner, LarcOptions options = {});

  // Adapts every gradient, then runs the inner step (the closure runs once,
  // before adapting).
  ::torch::Tensor step(LossClosure closure = nullptr) override;

  // LARC keeps no state of its own: these save and load the inner optimizer
  // (its state and group options) and take its group options back.
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  ::torch::optim::Optimizer& inner() { return *inner_; }
  const ::torch::optim::Optimizer& inner() const { return *inner_; }
  const LarcOptions& options() const { return options_; }

 private:
  double weight_decay(const ::torch::optim::OptimizerOptions& group, size_t index) const;
  void set_weight_decay(::torch::optim::OptimizerOptions& group, double wd) const;
  void adapt_gradients(double lr, double weight_decay,
                       const std::vector<::torch::Tensor>& params) const;

  std::shared_ptr<::torch::optim::Optimizer> inner_;
  LarcOptions options_;
};

}  // namespace lockstep::optim
