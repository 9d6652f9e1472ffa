// Pieces of the layout-independent model checkpoints
// (src/parallel/model_checkpoint.cc, Note [Whole-model view]).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel/checkpoint.h"

namespace lockstep::parallel::detail {

// A module that is nothing but tensors under dotted names ("3.fc1.weight"
// becomes child "3", child "fc1", parameter "weight"), so Module::save and
// Module::load see the nesting a single-process model has. Owns its children;
// not thread-safe.
class NamedTensors : public ::torch::nn::Module {
 public:
  void add(const std::string& name, const ::torch::Tensor& tensor, bool buffer);
  // The tensor registered as `name`; lockstep::Error when there is none.
  ::torch::Tensor get(const std::string& name) const;

 private:
  std::map<std::string, std::shared_ptr<NamedTensors>> subtrees_;
};

// The ShardSpec of each of `parameters` (by name) that belongs to a
// ShardedModule inside `module`; matched by tensor identity, so the names
// may be the whole model's while `module` is one stage.
std::map<std::string, ShardSpec> shards_by_name(
    ::torch::nn::Module& module,
    const std::vector<std::pair<std::string, ::torch::Tensor>>& parameters);

using StateMap =
    ska::flat_hash_map<OptimizerStateKey, std::unique_ptr<::torch::optim::OptimizerParamState>>;

// Copies this rank's slice of every whole tensor in `whole` into `parts`,
// and makes `optimizer`'s state the slices of `whole_state` (keyed by the
// whole tensors). Throws lockstep::Error naming a shape that does not fit.
void take_slices(const NamedTensors& whole, const ModelParts& parts, const StateMap& whole_state,
                 ::torch::optim::Optimizer& optimizer);

}  // namespace lockstep::parallel::detail
