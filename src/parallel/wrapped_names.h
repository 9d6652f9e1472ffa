// Module wrappers that are transparent for names (Checkpointed,
// FullyShardedUnit): the wrapper registers the wrapped module's children,
// parameters and buffers as its own, under their own names, so a model's
// named_parameters() and checkpoints are the same with or without wrappers.
#pragma once

#include <torch/torch.h>

namespace lockstep::parallel::detail {

inline void adopt_names(::torch::nn::Module& wrapper, const ::torch::nn::Module& wrapped) {
  for (const auto& child : wrapped.named_children())
    wrapper.register_module(child.key(), child.value());
  for (const auto& p : wrapped.named_parameters(/*recurse=*/false))
    wrapper.register_parameter(p.key(), p.value(), p.value().requires_grad());
  for (const auto& b : wrapped.named_buffers(/*recurse=*/false))
    wrapper.register_buffer(b.key(), b.value());
}

}  // namespace lockstep::parallel::detail
