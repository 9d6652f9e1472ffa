// grouped_allgather, grouped_reduce_scatter and sparse_allreduce: Horovod's
// list and sparse forms, built on the single-tensor collectives.
#include <fmt/format.h>

#include <algorithm>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {
namespace {

using ::torch::Tensor;

bool any_records_graph(const std::vector<Tensor>& tensors) {
  return ::torch::GradMode::is_enabled() &&
         std::any_of(tensors.begin(), tensors.end(),
                     [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void check_group(const std::vector<Tensor>& tensors, const std::vector<std::string>& names,
                 const char* op) {
  if (tensors.size() != names.size())
    throw InvalidArgument(fmt::format("lockstep::torch::{}: {} tensors but {} names; give one "
                                      "name per tensor", op, tensors.size(), names.size()));
  if (tensors.empty()) throw InvalidArgument(fmt::format("lockstep::torch::{}: no tensors", op));
}

// Submits every tensor with `submit` before waiting on the first, so all of
// them are in flight together (one negotiation cycle where the ranks agree).
template <typename Submit>
std::vector<Tensor> all_in_flight(const std::vector<Tensor>& tensors,
                                  std::vector<std::string>& names, Submit submit) {
  std::vector<TensorHandle> handles;
  for (size_t i = 0; i < tensors.size(); ++i)
    handles.push_back(submit(tensors[i], std::move(names[i])));
  std::vector<Tensor> out;
  for (auto& h : handles) out.push_back(h.result());
  return out;
}

}  // namespace

std::vector<Tensor> grouped_allgather(const std::vector<Tensor>& tensors,
                                      std::vector<std::string> names, int process_set) {
  check_group(tensors, names, "grouped_allgather");
  if (any_records_graph(tensors)) {
    std::vector<Tensor> out;
    for (size_t i = 0; i < tensors.size(); ++i)
      out.push_back(allgather(tensors[i], std::move(names[i]), process_set));
    return out;
  }
  return all_in_flight(tensors, names, [&](const Tensor& t, std::string name) {
    return allgather_async(t, std::move(name), process_set);
  });
}

std::vector<Tensor> grouped_reduce_scatter(const std::vector<Tensor>& tensors,
                                           std::vector<std::string> names,
                                           ReduceScatterOptions options) {
  check_group(tensors, names, "grouped_reduce_scatter");
  if (any_records_graph(tensors)) {
    std::vector<Tensor> out;
    for (size_t i = 0; i < tensors.size(); ++i)
      out.push_back(reduce_scatter(tensors[i], std::move(names[i]), options));
    return out;
  }
  return all_in_flight(tensors, names, [&](const Tensor& t, std::string name) {
    return reduce_scatter_async(t, std::move(name), options);
  });
}

Tensor sparse_allreduce(const Tensor& tensor, std::string name, ReduceOp op, int process_set) {
  if (!tensor.defined() || !tensor.is_sparse())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::sparse_allreduce '{}': needs a sparse COO tensor; use allreduce for "
        "dense ones", name));
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::sparse_allreduce '{}': only kSum and kAverage (an allgather of indices "
        "and values cannot take a min, max or product)", name));
  if (name.empty())
    throw InvalidArgument("lockstep::torch::sparse_allreduce: needs a name (it runs two "
                          "collectives, <name>.indices and <name>.values)");
  Tensor t = tensor.detach();
  // Allgather concatenates along dim 0: indices are [sparse_dim, nnz], so
  // they travel transposed (nnz rows).
  TensorHandle indices = allgather_async(t._indices().t().contiguous(), name + ".indices",
                                         process_set);
  TensorHandle values = allgather_async(t._values().contiguous(), name + ".values",
                                        process_set);
  Tensor all_values = values.result();
  Tensor all_indices = indices.result().t();
  if (op == ReduceOp::kAverage) {
    // The set's size: the world's, or counted by a tiny allgather.
    const int64_t members =
        process_set == 0
            ? size()
            : allgather_async(::torch::ones({1}, ::torch::kInt64), name + ".members", process_set)
                  .result()
                  .numel();
    all_values = all_values.is_floating_point() ? all_values / members
                                                : all_values.div(members, "trunc");
  }
  return ::torch::sparse_coo_tensor(all_indices, all_values, t.sizes(), t.options());
}

}  // namespace lockstep::torch
