// The grouped collectives (grouped_allreduce_async_, grouped_allgather_async,
// grouped_reduce_scatter_async): a list of tensors submitted to the engine as
// one group under one handle, whole or not at all.
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/collectives.h"
#include "torch/collectives_seam.h"

namespace lockstep::torch {

using detail::check_group_lists;
using detail::check_one_group;
using detail::claim_group;
using detail::ClaimedGroup;
using detail::copy_back;
using detail::eng;
using detail::engine_input;
using detail::holding;
using detail::op_options_for;
using detail::refuse_grad_leaf;
using detail::run_each;
using detail::shape_of;
using detail::tensor_allocator;
using detail::to_input_device;

namespace {

// A grouped allgather's or reduce-scatter's engine inputs and result slots.
struct AllocatingGroup {
  std::vector<::torch::Tensor> inputs;
  std::vector<const void*> pointers;
  std::vector<engine::Shape> shapes;
  std::vector<engine::DataType> dtypes;
  std::vector<engine::Allocator> allocates;
  std::vector<std::shared_ptr<::torch::Tensor>> results;
  std::vector<std::function<void()>> finishes;
};

AllocatingGroup allocating_group(const std::vector<::torch::Tensor>& tensors,
                                 const std::vector<std::string>& names, const char* op,
                                 bool scalars_as_rows) {
  check_group_lists(tensors.size(), names.size(), op);
  AllocatingGroup g;
  for (const ::torch::Tensor& tensor : tensors) {
    ::torch::Tensor input = engine_input(tensor, op);
    if (scalars_as_rows && input.dim() == 0) input = input.reshape({1});
    g.inputs.push_back(input);
    g.pointers.push_back(input.data_ptr());
    g.shapes.push_back(shape_of(input));
    g.dtypes.push_back(to_comm_dtype(input.scalar_type()));
    g.results.push_back(std::make_shared<::torch::Tensor>());
    g.allocates.push_back(tensor_allocator(g.results.back(), input));
    g.finishes.push_back(to_input_device(g.results.back(), tensor));
  }
  check_one_group(g.inputs, tensors, names, op, /*one_dtype=*/false);
  return g;
}

}  // namespace

TensorHandle grouped_allreduce_async_(std::vector<::torch::Tensor>& tensors,
                                      std::vector<std::string> names, AllreduceOptions options) {
  check_group_lists(tensors.size(), names.size(), "grouped_allreduce_async_");
  std::vector<::torch::Tensor> buffers;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<engine::Shape> shapes;
  std::vector<std::function<void()>> copies;
  std::vector<std::shared_ptr<::torch::Tensor>> results;
  for (auto& tensor : tensors) {
    refuse_grad_leaf(tensor, "grouped_allreduce");
    buffers.push_back(engine_input(tensor, "grouped_allreduce"));
    inputs.push_back(buffers.back().data_ptr());
    outputs.push_back(buffers.back().data_ptr());
    shapes.push_back(shape_of(buffers.back()));
    copies.push_back(copy_back(tensor, buffers.back()));
    results.push_back(std::make_shared<::torch::Tensor>(tensor));
  }
  check_one_group(buffers, tensors, names, "grouped_allreduce_async_", /*one_dtype=*/true);
  ClaimedGroup g = claim_group(std::move(names), "grouped_allreduce", options.process_set);
  engine::Handle handle = eng().grouped_allreduce_async(
      g.names, inputs, outputs, shapes, to_comm_dtype(buffers.front().scalar_type()), options.op,
      options.prescale, options.postscale, op_options_for(buffers.front(), options.process_set));
  return TensorHandle(std::move(handle), std::move(results), std::move(buffers),
                      holding(run_each(std::move(copies)), std::move(g.leases)));
}

TensorHandle grouped_allgather_async(const std::vector<::torch::Tensor>& tensors,
                                     std::vector<std::string> names, int process_set) {
  AllocatingGroup g = allocating_group(tensors, names, "grouped_allgather", true);
  ClaimedGroup c = claim_group(std::move(names), "grouped_allgather", process_set);
  engine::Handle handle =
      eng().grouped_allgather_async(c.names, g.pointers, g.shapes, g.dtypes, std::move(g.allocates),
                                    op_options_for(g.inputs.front(), process_set));
  return TensorHandle(std::move(handle), std::move(g.results), std::move(g.inputs),
                      holding(run_each(std::move(g.finishes)), std::move(c.leases)));
}

TensorHandle grouped_reduce_scatter_async(const std::vector<::torch::Tensor>& tensors,
                                          std::vector<std::string> names,
                                          ReduceScatterOptions options) {
  AllocatingGroup g = allocating_group(tensors, names, "grouped_reduce_scatter", false);
  ClaimedGroup c = claim_group(std::move(names), "grouped_reduce_scatter", options.process_set);
  engine::Handle handle = eng().grouped_reduce_scatter_async(
      c.names, g.pointers, g.shapes, g.dtypes, options.op, std::move(g.allocates),
      op_options_for(g.inputs.front(), options.process_set));
  return TensorHandle(std::move(handle), std::move(g.results), std::move(g.inputs),
                      holding(run_each(std::move(g.finishes)), std::move(c.leases)));
}

}  // namespace lockstep::torch
