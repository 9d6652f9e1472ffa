// Averaged weights: an exponential moving average of a model for evaluation
// (WeightEma), and Lookahead's slow weights (Lookahead). Both work beside any
// optimizer, including lockstep::torch::DistributedOptimizer: they only read
// and write tensors after the step, and every rank computes the same values
// from the same (already averaged) weights, so ranks stay identical without
// communicating.
//
// Not thread-safe: call them from the training thread, between steps. Each
// owns its copies of the tensors; the module and parameters it is given
// must outlive it (Lookahead keeps the parameter handles).
#pragma once

#include <torch/nn/module.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <vector>

namespace lockstep::optim {

struct WeightEmaOptions {
  double decay = 0.99;
  // Early on use min(decay, (1 + t) / (10 + t)) after t updates (TensorFlow's
  // ExponentialMovingAverage num_updates), so the average is not dominated
  // by the initial weights during a short run.
  bool warmup = true;
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

// avg ← d·avg + (1 − d)·w for every floating parameter and buffer (BatchNorm
// running statistics included); integer buffers (num_batches_tracked) are
// copied. Evaluate with the averages swapped in:
//
//   optim::WeightEma ema(*model, {.decay = 0.99});
//   ... opt.step(); ema.update(*model);
//   { auto applied = ema.apply_to(*model); evaluate(*model); }  // swapped back here
class WeightEma {
 public:
  // Starts the averages at the module's current values. Throws
  // lockstep::InvalidArgument for bad options.
  explicit WeightEma(const ::torch::nn::Module& module, WeightEmaOptions options = {});

  // After each optimizer step. Throws InvalidArgument when the module's
  // tensors differ in number or shape from the ones the average started with.
  void update(const ::torch::nn::Module& module);

  // RAII: while alive, `module` holds the averages; its own values come back
  // when it is destroyed. Move-only.
  class Applied {
   public:
    Applied(Applied&&) noexcept = default;
    Applied& operator=(Applied&&) = delete;
    ~Applied();

   private:
    friend class WeightEma;
    Applied(::torch::nn::Module& module, std::vector<::torch::Tensor> saved)
        : module_(&module), saved_(std::move(saved)) {}
    ::torch::nn::Module* module_;
    std::vector<::torch::Tensor> saved_;
  };
  [[nodiscard]] Applied apply_to(::torch::nn::Module& module) const;

  // Copies the averages into `module` for good (e.g. before saving a model).
  void copy_to(::torch::nn::Module& module) const;

  int64_t updates() const { return updates_; }
  // The decay the next update() will use.
  double next_decay() const;
  const WeightEmaOptions& options() const { return options_; }

  // Checkpoints: the averages and the update count.
  void save(::torch::serialize::OutputArchive& archive) const;
  void load(::torch::serialize::InputArchive& archive);

 private:
  WeightEmaOptions options_;
  std::vector<::torch::Tensor> averages_;  // parameters, then buffers, in registration order
  int64_t updates_ = 0;
};

struct LookaheadOptions {
  int64_t k = 5;       // fast steps per slow update
  double alpha = 0.5;  // slow step size
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

// Lookahead (Zhang, Lucas, Hinton, Ba, 1907.08610) around any optimizer:
// after every k-th step, slow ← slow + α(fast − slow) and fast ← slow. The
// inner optimizer's state (momenta) is kept, as in the authors' code.
//
//   optim::Lookahead lookahead(model->parameters(), {.k = 5, .alpha = 0.5});
//   ... opt.step(); lookahead.after_step();
class Lookahead {
 public:
  // Starts the slow weights at the parameters' current values.
  explicit Lookahead(std::vector<::torch::Tensor> parameters, LookaheadOptions options = {});

  // Call after each optimizer step; true when this one synchronised.
  bool after_step();

  int64_t steps() const { return steps_; }
  const LookaheadOptions& options() const { return options_; }
  void save(::torch::serialize::OutputArchive& archive) const;
  void load(::torch::serialize::InputArchive& archive);

 private:
  LookaheadOptions options_;
  std::vector<::torch::Tensor> fast_;  // the parameters themselves
  std::vector<::torch::Tensor> slow_;
  int64_t steps_ = 0;
};

}  // namespace lockstep::optim
