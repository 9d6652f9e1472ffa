// Checking a stored state against a model before anything is loaded.
//
// Every loader (checkpoints of every strategy, safetensors and PyTorch
// state_dict files) compares the names, shapes and dtypes it found with what
// the model holds first, and throws naming the first mismatch, the first
// missing and the first extra tensor, so a file of another architecture
// never replaces a parameter (LibTorch's Module::load would silently take
// the file's shapes). The model and optimizer keep what they held.
//
// Stateless functions; thread-safe.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace lockstep::torch {

// A tensor as a file or a model describes it.
struct TensorInfo {
  std::string name;
  ::torch::ScalarType dtype = ::torch::kFloat;
  std::vector<int64_t> sizes{};
};

// The module's parameters, then its buffers, under their dotted names
// (named_parameters()/named_buffers(): PyTorch's state_dict names).
std::vector<TensorInfo> tensor_infos(const ::torch::nn::Module& module);

struct StateCheckOptions {
  bool dtypes = true;     // a dtype difference is a mismatch (false: any float may load)
  bool extra_ok = false;  // tensors in the file that the model lacks are allowed
};

// Throws lockstep::Error "<what> does not match the model: ..." naming the
// first tensor of another shape (or dtype), the first one the model has and
// `found` lacks, and the first one `found` has and the model lacks, with
// their counts; says nothing (returns) when they match.
void check_state_matches(const std::vector<TensorInfo>& model, const std::vector<TensorInfo>& found,
                         const std::string& what, const StateCheckOptions& options = {});

}  // namespace lockstep::torch
