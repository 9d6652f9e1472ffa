// Every tensor of a Module::save archive under the module's dotted names
// (parameters and buffers alike): what lockstep checkpoints hold under
// "model". Internal to src/torch: checkpoint.cc and state_dict_load.cc.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace lockstep::torch::detail {

void module_archive_tensors(::torch::serialize::InputArchive& archive, const std::string& prefix,
                            std::vector<std::pair<std::string, ::torch::Tensor>>& out);

}  // namespace lockstep::torch::detail
