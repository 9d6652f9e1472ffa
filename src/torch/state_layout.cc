#include "lockstep/torch/state_layout.h"

namespace lockstep::torch {

std::optional<PartialModule> partial_state_of(const ::torch::nn::Module& module) {
  // Itself apart: named_modules(include_self) needs a module owned by a
  // shared_ptr, and a caller's may live on the stack.
  if (const auto* partial = dynamic_cast<const PartialState*>(&module))
    return PartialModule{"", partial->whole_state_call()};
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    if (const auto* partial = dynamic_cast<const PartialState*>(item.value().get()))
      return PartialModule{item.key(), partial->whole_state_call()};
  return std::nullopt;
}

}  // namespace lockstep::torch
