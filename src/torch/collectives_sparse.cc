// sparse_allreduce: Horovod's sparse form, built on allgather.
#include <fmt/format.h>

#include <algorithm>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

using ::torch::Tensor;

Tensor sparse_allreduce(const Tensor& tensor, std::string name, ReduceOp op, int process_set) {
  if (!tensor.defined() || !tensor.is_sparse())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::sparse_allreduce '{}': needs a sparse COO tensor; use allreduce for "
        "dense ones",
        name));
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::sparse_allreduce '{}': only kSum and kAverage (an allgather of indices "
        "and values cannot take a min, max or product)",
        name));
  if (name.empty())
    throw InvalidArgument(
        "lockstep::torch::sparse_allreduce: needs a name (it runs two "
        "collectives, <name>.indices and <name>.values)");
  Tensor t = tensor.detach();
  // Allgather concatenates along dim 0: indices are [sparse_dim, nnz], so
  // they travel transposed (nnz rows).
  TensorHandle indices =
      allgather_async(t._indices().t().contiguous(), name + ".indices", process_set);
  TensorHandle values = allgather_async(t._values().contiguous(), name + ".values", process_set);
  Tensor all_values = values.result();
  Tensor all_indices = indices.result().t();
  if (op == ReduceOp::kAverage) {
    // The set's size: the world's, or counted by a tiny allgather.
    const int64_t members = process_set == 0 ? size()
                                             : allgather_async(::torch::ones({1}, ::torch::kInt64),
                                                               name + ".members", process_set)
                                                   .result()
                                                   .numel();
    all_values =
        all_values.is_floating_point() ? all_values / members : all_values.div(members, "trunc");
  }
  return ::torch::sparse_coo_tensor(all_indices, all_values, t.sizes(), t.options());
}

}  // namespace lockstep::torch
