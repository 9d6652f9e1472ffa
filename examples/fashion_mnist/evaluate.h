// Test-set accuracy of the main job, exact across ranks.
#pragma once

#include <torch/torch.h>

#include "common/fashion_data.h"

namespace lockstep::examples {

// Collective: each rank evaluates a contiguous slice of `test`; the result is
// total correct / total samples over all ranks. The model is put in eval mode
// and back in training mode afterwards.
double evaluate(::torch::nn::Module& model,
                const std::function<::torch::Tensor(const ::torch::Tensor&)>& forward,
                const FashionSplit& test, int64_t batch_size = 1000);

}  // namespace lockstep::examples
