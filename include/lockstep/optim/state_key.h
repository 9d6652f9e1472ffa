// The key torch::optim::Optimizer::state() files a parameter's state under:
// its TensorImpl's address, as text in LibTorch 1.x and as the pointer
// itself in 2.x. torch's own optimizers and torch::optim::serialize use the
// same key, so state saved by one process loads into another's parameters.
#pragma once

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace lockstep::optim {

using StateKey =
    std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>::key_type;

inline StateKey state_key(const ::torch::Tensor& p) {
  if constexpr (std::is_same_v<StateKey, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string wrote in 1.x
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

}  // namespace lockstep::optim
