// Any optimizer's per-parameter state, taken apart and put together through
// the serialize() methods every torch::optim::OptimizerParamState has, so the
// sharding and checkpoint code needs no list of optimizer types.
//
// Stateless functions; thread-safe on distinct objects.
#pragma once

#include <torch/torch.h>

#include "lockstep/optim/state_key.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::parallel {

// Named values of one parameter's state (tensors, step counters...).
using StateValues = std::vector<std::pair<std::string, c10::IValue>>;

StateValues state_values(const ::torch::optim::OptimizerParamState& state);
// The same through bytes, to move a state between ranks.
std::string serialize_state(const ::torch::optim::OptimizerParamState& state);
StateValues parse_state(const std::string& bytes);
// A state of `prototype`'s type holding `values`.
std::unique_ptr<::torch::optim::OptimizerParamState> state_from_values(
    const ::torch::optim::OptimizerParamState& prototype, const StateValues& values);

// LibTorch's key for a parameter in Optimizer::state(): its TensorImpl's
// address, as text in LibTorch 1.x and as the pointer itself in 2.x.
using OptimizerStateKey = optim::StateKey;
OptimizerStateKey state_key(const ::torch::Tensor& param);

// The module's parameters that require gradients, by dotted name: what the
// optimizer wrappers (ShardedOptimizer, ParameterServer) wrap by default.
std::vector<std::pair<std::string, ::torch::Tensor>> trainable_parameters(
    const ::torch::nn::Module& module);

// Bytes of every tensor in the optimizer's state (what it adds per rank on
// top of parameters and gradients).
int64_t optimizer_state_bytes(const ::torch::optim::Optimizer& optimizer);

}  // namespace lockstep::parallel
