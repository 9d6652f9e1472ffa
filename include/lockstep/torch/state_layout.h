// How a module's state is laid out across ranks, as the checkpoint calls
// ask it (issue 43: nothing to choose wrong).
//
// A module that holds only part of its state on each rank (a
// tensor-parallel layer of lockstep::parallel, whose weight is one slice)
// implements PartialState. lockstep::torch::save_checkpoint and
// load_checkpoint, which write and read whole tensors from one rank, refuse
// a model containing one, naming the call that saves it. The torch layer
// cannot see the parallel layer's types; this interface is how it asks.
//
// Stateless; thread-safe.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace lockstep::torch {

class PartialState {
 public:
  virtual ~PartialState() = default;
  // The call that saves (and loads) a model holding this module, for the
  // error message, e.g. "lockstep::parallel::save_checkpoint(path,
  // lockstep::parallel::model_parts(model), optimizer, progress)".
  virtual std::string whole_state_call() const = 0;
};

struct PartialModule {
  std::string name;  // dotted, "" for the module itself
  std::string call;  // its whole_state_call()
};
// The first module of `module` (itself included, in named_modules() order)
// that implements PartialState; nullopt when every rank holds it whole.
std::optional<PartialModule> partial_state_of(const ::torch::nn::Module& module);

}  // namespace lockstep::torch
