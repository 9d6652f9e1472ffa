// The synchronous out-of-place collectives as autograd functions, with
// Horovod's backward rules (horovod/torch/mpi_ops.py), so that a loss built
// from their results differentiates through them: Note [Collective
// gradients]. Without a graph to record (no input requires grad, or grad
// mode is off) they are the plain engine calls.
#include <fmt/format.h>

#include <algorithm>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "torch/collectives_internal.h"

namespace lockstep::torch {
namespace {

using ::torch::Tensor;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

// Note [Collective gradients]
// Backward runs collectives, named after the forward ones ("<name>.grad",
// or auto-named when the forward was), so every rank of the set must run
// the same backward: as in Horovod, a rank that skips it leaves the others
// waiting until the stall timeout names the missing rank. The gradients:
//   allreduce(op, pre, post)   -> allreduce(grad, op, pre, post) (sum/average)
//   allgather                  -> allreduce_sum(grad), this rank's rows
//   broadcast(root)            -> allreduce_sum(grad) on root, zero elsewhere
//   alltoall(splits)           -> alltoall(grad, the splits received)
//   reduce_scatter(sum | avg)  -> allgather(grad) (/ set size for average)
// Min, max and product have no gradient lockstep can give (Horovod applies
// the forward op to the gradient, which is not one); backward refuses them.

bool records_graph(const Tensor& t) {
  return ::torch::GradMode::is_enabled() && t.defined() && t.requires_grad();
}

std::string grad_name(const std::string& name, const char* suffix = "") {
  return name.empty() ? name : name + ".grad" + suffix;
}

void require_linear(ReduceOp op, const char* collective) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: backward through op {} is not defined (only sum and average have "
        "a gradient); detach the input, or reduce with sum or average",
        collective, comm::reduce_op_name(op)));
}

using detail::place_in_set;

AllreduceOptions allreduce_options(AutogradContext* ctx) {
  AllreduceOptions o;
  o.op = static_cast<ReduceOp>(ctx->saved_data["op"].toInt());
  o.prescale = ctx->saved_data["prescale"].toDouble();
  o.postscale = ctx->saved_data["postscale"].toDouble();
  o.process_set = static_cast<int>(ctx->saved_data["set"].toInt());
  return o;
}

void save_allreduce_options(AutogradContext* ctx, const AllreduceOptions& o) {
  ctx->saved_data["op"] = static_cast<int64_t>(o.op);
  ctx->saved_data["prescale"] = o.prescale;
  ctx->saved_data["postscale"] = o.postscale;
  ctx->saved_data["set"] = static_cast<int64_t>(o.process_set);
}

struct AllreduceFn : ::torch::autograd::Function<AllreduceFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& tensor, std::string name,
                        AllreduceOptions options) {
    ctx->saved_data["name"] = name;
    save_allreduce_options(ctx, options);
    return allreduce_async(tensor, std::move(name), options).result();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AllreduceOptions o = allreduce_options(ctx);
    require_linear(o.op, "allreduce");
    std::string name = grad_name(ctx->saved_data["name"].toStringRef());
    return {allreduce_async(grads[0], name, o).result(), Tensor(), Tensor()};
  }
};

// A grouped function's names, as backward names them.
std::vector<std::string> saved_names(AutogradContext* ctx, const char* suffix = "") {
  std::vector<std::string> names;
  for (const c10::IValue& n : ctx->saved_data["names"].toListRef())
    names.push_back(grad_name(n.toStringRef(), suffix));
  return names;
}

struct GroupedAllreduceFn : ::torch::autograd::Function<GroupedAllreduceFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors,
                               std::vector<std::string> names, AllreduceOptions options) {
    ctx->saved_data["names"] = c10::List<std::string>(names);
    save_allreduce_options(ctx, options);
    return grouped_allreduce(tensors.vec(), std::move(names), options);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AllreduceOptions o = allreduce_options(ctx);
    require_linear(o.op, "grouped_allreduce");
    variable_list out = grouped_allreduce(grads, saved_names(ctx), o);
    out.resize(out.size() + 2);  // names, options
    return out;
  }
};

struct AllgatherFn : ::torch::autograd::Function<AllgatherFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& tensor, std::string name,
                        int process_set) {
    ctx->saved_data["name"] = name;
    ctx->saved_data["set"] = static_cast<int64_t>(process_set);
    ctx->saved_data["shape"] = tensor.sizes().vec();
    return allgather_async(tensor, std::move(name), process_set).result();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string& name = ctx->saved_data["name"].toStringRef();
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    int64_t rows = shape.empty() ? 1 : shape[0];
    Tensor summed =
        allreduce_async(grads[0], grad_name(name), {.op = ReduceOp::kSum, .process_set = set})
            .result();
    // Every member's (global rank, rows), in set order: this rank's rows
    // start after those of the members before it.
    Tensor table =
        allgather_async(::torch::tensor({static_cast<int64_t>(rank()), rows}).view({1, 2}),
                        grad_name(name, ".rows"), set)
            .result();
    int64_t index = (table.select(1, 0) == rank()).nonzero().item<int64_t>();
    int64_t offset = table.select(1, 1).narrow(0, 0, index).sum().item<int64_t>();
    return {summed.narrow(0, offset, rows).reshape(shape), Tensor(), Tensor()};
  }
};

// Backward: one grouped allreduce-sum of the gradients, then each member's
// own rows, found from one allgather of every member's row counts.
struct GroupedAllgatherFn : ::torch::autograd::Function<GroupedAllgatherFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors,
                               std::vector<std::string> names, int process_set) {
    ctx->saved_data["names"] = c10::List<std::string>(names);
    ctx->saved_data["set"] = static_cast<int64_t>(process_set);
    c10::List<std::vector<int64_t>> shapes;
    for (const Tensor& t : tensors) shapes.push_back(t.sizes().vec());
    ctx->saved_data["shapes"] = shapes;
    return grouped_allgather_async(tensors.vec(), std::move(names), process_set).results();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    std::vector<std::vector<int64_t>> shapes;
    for (const c10::IValue& s : ctx->saved_data["shapes"].toListRef())
      shapes.push_back(s.toIntVector());
    std::vector<int64_t> row{static_cast<int64_t>(rank())};
    for (const auto& shape : shapes) row.push_back(shape.empty() ? 1 : shape[0]);
    variable_list summed =
        grouped_allreduce(grads, saved_names(ctx), {.op = ReduceOp::kSum, .process_set = set});
    const auto width = static_cast<int64_t>(row.size());
    Tensor table = allgather_async(::torch::tensor(row).view({1, width}),
                                   saved_names(ctx, ".rows").front(), set)
                       .result();
    int64_t index = (table.select(1, 0) == rank()).nonzero().item<int64_t>();
    variable_list out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor rows = table.select(1, static_cast<int64_t>(i) + 1);
      int64_t offset = rows.narrow(0, 0, index).sum().item<int64_t>();
      out.push_back(summed[i].narrow(0, offset, row[i + 1]).reshape(shapes[i]));
    }
    out.resize(out.size() + 2);  // names, process_set
    return out;
  }
};

// Backward: one grouped allgather of the gradients (/ set size for average).
struct GroupedReduceScatterFn : ::torch::autograd::Function<GroupedReduceScatterFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors,
                               std::vector<std::string> names, ReduceScatterOptions options) {
    ctx->saved_data["names"] = c10::List<std::string>(names);
    ctx->saved_data["op"] = static_cast<int64_t>(options.op);
    ctx->saved_data["set"] = static_cast<int64_t>(options.process_set);
    return grouped_reduce_scatter_async(tensors.vec(), std::move(names), options).results();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto op = static_cast<ReduceOp>(ctx->saved_data["op"].toInt());
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    require_linear(op, "grouped_reduce_scatter");
    std::vector<std::string> names = saved_names(ctx);
    variable_list out = grouped_allgather_async(grads, names, set).results();
    if (op == ReduceOp::kAverage) {
      const int n = place_in_set(set, saved_names(ctx, ".place").front()).size;
      for (Tensor& g : out) g.div_(n);
    }
    out.resize(out.size() + 2);  // names, options
    return out;
  }
};

struct BroadcastFn : ::torch::autograd::Function<BroadcastFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& tensor, int root, std::string name,
                        int process_set) {
    ctx->saved_data["name"] = name;
    ctx->saved_data["root"] = static_cast<int64_t>(root);
    ctx->saved_data["set"] = static_cast<int64_t>(process_set);
    return detail::broadcast_copy(tensor, root, std::move(name), process_set);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string& name = ctx->saved_data["name"].toStringRef();
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    Tensor summed =
        allreduce_async(grads[0], grad_name(name), {.op = ReduceOp::kSum, .process_set = set})
            .result();
    if (place_in_set(set, grad_name(name, ".place")).rank != ctx->saved_data["root"].toInt())
      summed.zero_();
    return {summed, Tensor(), Tensor(), Tensor()};
  }
};

struct AlltoallFn : ::torch::autograd::Function<AlltoallFn> {
  // `received`, when given, gets the rows received from each member.
  static Tensor forward(AutogradContext* ctx, const Tensor& tensor, std::vector<int64_t> splits,
                        std::string name, int process_set, std::vector<int64_t>* received) {
    ctx->saved_data["name"] = name;
    ctx->saved_data["set"] = static_cast<int64_t>(process_set);
    ctx->saved_data["splits"] = splits;
    ctx->saved_data["shape"] = tensor.sizes().vec();
    TensorHandle handle = alltoall_async(tensor, std::move(splits), std::move(name), process_set);
    Tensor out = handle.result();
    if (received) *received = handle.received_splits();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string& name = ctx->saved_data["name"].toStringRef();
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    std::vector<int64_t> splits = ctx->saved_data["splits"].toIntVector();
    std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    if (splits.empty()) {  // an even split, as the forward made it
      int n = place_in_set(set, grad_name(name, ".place")).size;
      splits.assign(n, shape[0] / n);
    }
    // What each member sent here is what goes back to it.
    Tensor received =
        alltoall_async(::torch::tensor(splits), {}, grad_name(name, ".splits"), set).result();
    std::vector<int64_t> back(received.data_ptr<int64_t>(),
                              received.data_ptr<int64_t>() + received.numel());
    Tensor grad = alltoall_async(grads[0], back, grad_name(name), set).result();
    return {grad.reshape(shape), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct ReduceScatterFn : ::torch::autograd::Function<ReduceScatterFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& tensor, std::string name,
                        ReduceScatterOptions options) {
    ctx->saved_data["name"] = name;
    ctx->saved_data["op"] = static_cast<int64_t>(options.op);
    ctx->saved_data["set"] = static_cast<int64_t>(options.process_set);
    return reduce_scatter_async(tensor, std::move(name), options).result();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string& name = ctx->saved_data["name"].toStringRef();
    auto op = static_cast<ReduceOp>(ctx->saved_data["op"].toInt());
    int set = static_cast<int>(ctx->saved_data["set"].toInt());
    require_linear(op, "reduce_scatter");
    Tensor grad = allgather_async(grads[0], grad_name(name), set).result();
    if (op == ReduceOp::kAverage) grad.div_(place_in_set(set, grad_name(name, ".place")).size);
    return {grad, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor allreduce(const Tensor& tensor, std::string name, AllreduceOptions options) {
  if (records_graph(tensor)) return AllreduceFn::apply(tensor, std::move(name), options);
  return allreduce_async(tensor, std::move(name), options).result();
}

std::vector<Tensor> grouped_allreduce(const std::vector<Tensor>& tensors,
                                      std::vector<std::string> names, AllreduceOptions options) {
  if (std::any_of(tensors.begin(), tensors.end(), records_graph))
    return GroupedAllreduceFn::apply(at::TensorList(tensors), std::move(names), options);
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors)
    copies.push_back(t.defined() ? t.detach().clone(at::MemoryFormat::Contiguous) : t);
  grouped_allreduce_async_(copies, std::move(names), options).wait();
  return copies;
}

Tensor allgather(const Tensor& tensor, std::string name, int process_set) {
  if (records_graph(tensor)) return AllgatherFn::apply(tensor, std::move(name), process_set);
  return allgather_async(tensor, std::move(name), process_set).result();
}

std::vector<Tensor> grouped_allgather(const std::vector<Tensor>& tensors,
                                      std::vector<std::string> names, int process_set) {
  if (std::any_of(tensors.begin(), tensors.end(), records_graph))
    return GroupedAllgatherFn::apply(at::TensorList(tensors), std::move(names), process_set);
  return grouped_allgather_async(tensors, std::move(names), process_set).results();
}

std::vector<Tensor> grouped_reduce_scatter(const std::vector<Tensor>& tensors,
                                           std::vector<std::string> names,
                                           ReduceScatterOptions options) {
  if (std::any_of(tensors.begin(), tensors.end(), records_graph))
    return GroupedReduceScatterFn::apply(at::TensorList(tensors), std::move(names), options);
  return grouped_reduce_scatter_async(tensors, std::move(names), options).results();
}

Tensor broadcast(const Tensor& tensor, int root, std::string name, int process_set) {
  if (records_graph(tensor)) return BroadcastFn::apply(tensor, root, std::move(name), process_set);
  return detail::broadcast_copy(tensor, root, std::move(name), process_set);
}

Tensor alltoall(const Tensor& tensor, std::vector<int64_t> splits, std::string name,
                int process_set) {
  if (records_graph(tensor))
    return AlltoallFn::apply(tensor, std::move(splits), std::move(name), process_set, nullptr);
  return alltoall_async(tensor, std::move(splits), std::move(name), process_set).result();
}

AlltoallResult alltoall_with_splits(const Tensor& tensor, std::vector<int64_t> splits,
                                    std::string name, int process_set) {
  AlltoallResult r;
  if (records_graph(tensor)) {
    r.output = AlltoallFn::apply(tensor, std::move(splits), std::move(name), process_set,
                                 &r.received_splits);
    return r;
  }
  TensorHandle handle = alltoall_async(tensor, std::move(splits), std::move(name), process_set);
  r.output = handle.result();
  r.received_splits = handle.received_splits();
  return r;
}

Tensor reduce_scatter(const Tensor& tensor, std::string name, ReduceScatterOptions options) {
  if (records_graph(tensor)) return ReduceScatterFn::apply(tensor, std::move(name), options);
  return reduce_scatter_async(tensor, std::move(name), options).result();
}

}  // namespace lockstep::torch
