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
// once, inside the adapted gradient. As in apex, a skipped tensor gets no
// decay that step. LARC rewrites p.grad() in place.
//
// The weight decay is read from, and zeroed in, the group options of
// torch::optim::{SGD, Adam, AdamW, RMSprop, Adagrad} and lockstep's Lars,
// Lamb and NovoGrad (see group_weight_decay); other optimizers' groups count
// as wd = 0 and are left alone. For the decoupled decays (AdamW, Lamb) this
// turns the decay into an L2 term inside the gradient, as apex does.
//
// Not thread-safe; shares the inner optimizer (by shared_ptr) with the
// caller, who may keep using it for schedules (param_groups()).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <optional>

namespace lockstep::optim {

struct LarcOptions {
  double trust_coefficient = 0.02;  // η, apex's default
  bool clip = true;
  double eps = 1e-8;
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

// The weight decay of a group's options, if its type is one LARC knows.
std::optional<double> group_weight_decay(const ::torch::optim::OptimizerOptions& options);

class Larc {
 public:
  using LossClosure = ::torch::optim::Optimizer::LossClosure;

  // Throws lockstep::InvalidArgument for a null optimizer or bad options.
  explicit Larc(std::shared_ptr<::torch::optim::Optimizer> inner, LarcOptions options = {});
  Larc(const Larc&) = delete;
  Larc& operator=(const Larc&) = delete;

  // Adapts every gradient, then runs the inner step (with the closure).
  ::torch::Tensor step(LossClosure closure = nullptr);
  void zero_grad() { inner_->zero_grad(); }

  ::torch::optim::Optimizer& inner() { return *inner_; }
  const ::torch::optim::Optimizer& inner() const { return *inner_; }
  const LarcOptions& options() const { return options_; }

  // LARC keeps no state of its own: these save and load the inner optimizer.
  void save(::torch::serialize::OutputArchive& archive) const { inner_->save(archive); }
  void load(::torch::serialize::InputArchive& archive) { inner_->load(archive); }

 private:
  void adapt_gradients(double lr, double weight_decay,
                       const std::vector<::torch::Tensor>& params) const;

  std::shared_ptr<::torch::optim::Optimizer> inner_;
  LarcOptions options_;
};

// So that torch::save(larc, stream) / torch::load(larc, stream) work.
::torch::serialize::OutputArchive& operator<<(::torch::serialize::OutputArchive& archive,
                                              const Larc& larc);
::torch::serialize::InputArchive& operator>>(::torch::serialize::InputArchive& archive,
                                             Larc& larc);

}  // namespace lockstep::optim
