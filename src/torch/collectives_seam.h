// Internal: the seam between lockstep::torch and the engine. Every engine
// call of the torch layer goes through eng() in collectives*.cc; these are
// the pieces they share: names held until waited (Note [Names pending until
// waited]), staging of CUDA tensors (Note [CUDA tensors over a host
// transport]), result allocators and the checks of a group. Thread-safe
// where the engine is: names are claimed under one lock.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/engine/engine.h"

namespace lockstep::torch::detail {

// The engine, or InvalidArgument naming init() when there is none.
engine::Engine& eng();

// A name taken from submission until the handle holding its lease is
// waited on or destroyed.
struct NameLease;
struct Claimed {
  std::string name;  // the caller's, or "<op>.<n>" when it gave none
  std::shared_ptr<NameLease> lease;
};
// InvalidArgument naming the name, the rank and the set when it is pending.
Claimed claim(std::string name, const char* op, int process_set);
struct ClaimedGroup {
  std::vector<std::string> names;
  std::vector<std::shared_ptr<NameLease>> leases;
};
// Each name claimed as a single operation's would be; all or none.
ClaimedGroup claim_group(std::vector<std::string> names, const char* op, int process_set);

// A handle's finish step, holding `leases` until it ran.
std::function<void()> holding(std::function<void()> finish,
                              std::vector<std::shared_ptr<NameLease>> leases);
// One finish step running each of a group's (the empty ones skipped).
std::function<void()> run_each(std::vector<std::function<void()>> steps);

engine::Shape shape_of(const ::torch::Tensor& t);
// The process set and, for a tensor on the device path, its memory kind and
// the event that says it is ready.
engine::OpOptions op_options_for(const ::torch::Tensor& input, int process_set);
// What the engine reads: contiguous host memory (staged from CUDA when the
// engine has no device communicator) or the contiguous CUDA tensor itself.
// InvalidArgument for undefined, non-strided and unsupported tensors.
::torch::Tensor engine_input(const ::torch::Tensor& t, const char* op);
// InvalidArgument for a leaf that requires grad while grad mode is on.
void refuse_grad_leaf(const ::torch::Tensor& t, const char* op);
// A private contiguous copy for the out-of-place collectives.
::torch::Tensor owned_copy(const ::torch::Tensor& t, const char* op);

// Engine-allocated results: a tensor where the engine's input lives, moved
// to the input's device when the handle is waited on.
engine::Allocator tensor_allocator(std::shared_ptr<::torch::Tensor> out,
                                   const ::torch::Tensor& input);
std::function<void()> to_input_device(std::shared_ptr<::torch::Tensor> out,
                                      const ::torch::Tensor& input);
// In-place results the engine could not write directly: copied back.
std::function<void()> copy_back(::torch::Tensor target, ::torch::Tensor buffer);

// The _into variants' output: checked, written in place when it fits,
// otherwise copied over (other device) or refused (other shape) on wait.
void check_into_output(const ::torch::Tensor& input, const ::torch::Tensor& output, const char* op);
engine::Allocator into_allocator(std::shared_ptr<::torch::Tensor> out, ::torch::Tensor output,
                                 ::torch::Device engine_device);
std::function<void()> into_finish(std::shared_ptr<::torch::Tensor> out, ::torch::Tensor output,
                                  const char* op);

// A group's lists: one name per tensor, at least one tensor.
void check_group_lists(size_t tensors, size_t names, const char* op);
// A group has one device (one ready event) and, when `one_dtype`, one dtype.
void check_one_group(const std::vector<::torch::Tensor>& buffers,
                     const std::vector<::torch::Tensor>& tensors,
                     const std::vector<std::string>& names, const char* op, bool one_dtype);

}  // namespace lockstep::torch::detail
