// A post-hook on a parameter's gradient accumulator: runs `ready` once
// backward has accumulated that parameter's gradient (ShardedOptimizer's
// stage 2, FullyShardedModel's per-unit reduce-scatter).
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace lockstep::parallel::detail {

class GradientReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list&) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace lockstep::parallel::detail
