// How a module's state is laid out across ranks, as the checkpoint calls
// ask it (issue 43: nothing to choose wrong).
//
// A module that holds only part of its state on each rank says so in one of
// two ways. A tensor-parallel layer of lockstep::parallel, whose weight is
// one slice, implements PartialState. A module whose owner, not the module,
// knows the layout (a Pipeline's stage layers: each rank trains only its
// stage's) is marked by that owner with a PartialStateMark.
// lockstep::torch::save_checkpoint and load_checkpoint, which write and read
// whole tensors from one rank, refuse a model containing either, naming the
// call that saves it; lockstep::parallel's checkpoint calls route a
// PartialState model and refuse a marked one in favour of its owner. The
// torch layer cannot see the parallel layer's types; this is how it asks.
//
// partial_state_of and the marks are thread-safe (a mutex guards the marks).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace lockstep::torch {

class PartialState {
 public:
  virtual ~PartialState() = default;
  // The call that saves (and loads) a model holding this module, for the
  // error message, e.g. "lockstep::parallel::save_checkpoint(path, model,
  // optimizer, progress)".
  virtual std::string whole_state_call() const = 0;
};

// Marks `module` (not its children) for as long as the mark lives. The
// module must outlive the mark. Not copyable or movable.
class PartialStateMark {
 public:
  PartialStateMark(const ::torch::nn::Module& module, std::string whole_state_call);
  ~PartialStateMark();
  PartialStateMark(const PartialStateMark&) = delete;
  PartialStateMark& operator=(const PartialStateMark&) = delete;

 private:
  const ::torch::nn::Module* module_;
};

struct PartialModule {
  std::string name;     // dotted, "" for the module itself
  std::string call;     // the call that saves a model holding it
  bool marked = false;  // by a PartialStateMark (its owner saves it), not a PartialState
};
// A marked module of `module` (itself included) if there is one, else the
// first that implements PartialState, in named_modules() order; nullopt when
// every rank holds it whole. A mark comes first: a pipeline stage whose
// layers are tensor-parallel is saved through its Pipeline.
std::optional<PartialModule> partial_state_of(const ::torch::nn::Module& module);

}  // namespace lockstep::torch
