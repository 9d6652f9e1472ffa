// Optimizer switching ("ImageNet in 15 minutes": RMSProp for the first
// epochs, then SGD). Both optimizers hold the same parameters; the epoch
// picks which one steps, so a resumed or re-formed job that knows its epoch
// steps the same one. The second starts with its own (fresh or loaded) state
// at the switch, as in the recipe.
//
// SwitchedOptimizer is itself a torch::optim::Optimizer (for
// DistributedOptimizer, ElasticState, apply_schedule, torch::save). Its
// param_groups() mirror the active optimizer's: set_epoch() switches the
// mirror, and the active optimizer's groups are refreshed from them before
// it steps, so schedules set rates on the SwitchedOptimizer after
// set_epoch(). save/load carry both optimizers' state and which is active.
//
// Not thread-safe; shares both optimizers (by shared_ptr) with the caller.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

#include "lockstep/optim/schedule.h"

namespace lockstep::optim {

class SwitchedOptimizer : public ::torch::optim::Optimizer {
 public:
  // Starts at epoch 0. Throws InvalidArgument when either optimizer is null,
  // they do not hold the same parameters in the same groups, or the switch
  // epoch is negative.
  SwitchedOptimizer(std::shared_ptr<::torch::optim::Optimizer> first,
                    std::shared_ptr<::torch::optim::Optimizer> second, OptimizerSwitch when);

  // Selects the optimizer of `epoch`; call it before setting the epoch's
  // rates on this optimizer.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Steps the optimizer of the current epoch.
  ::torch::Tensor step(LossClosure closure = nullptr) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  ::torch::optim::Optimizer& active(int64_t epoch) const;
  ::torch::optim::Optimizer& active() const { return active(epoch_); }
  ::torch::optim::Optimizer& first() const { return *first_; }
  ::torch::optim::Optimizer& second() const { return *second_; }

 private:
  ::torch::optim::Optimizer& mirrored() const { return second_mirrored_ ? *second_ : *first_; }
  void mirror(bool second);

  std::shared_ptr<::torch::optim::Optimizer> first_, second_;
  OptimizerSwitch when_;
  int64_t epoch_ = 0;
  bool second_mirrored_ = false;  // whose options param_groups() hold
};

}  // namespace lockstep::optim
