// Note [Tensor regions]
// The four autograd functions of Megatron-LM's mappings.py. Each pairs a
// forward communication with its adjoint in backward, so that composing them
// around sharded matrix products gives exactly the dense gradients:
//   copy_to    f: x           b: sum_r dy_r    (every rank used the same x)
//   reduce_from f: sum_r x_r  b: dy            (every rank's y is the sum)
//   gather_from f: [x_0 .. x_n-1] on the last dim   b: dy's own slice
//   scatter_to  f: x's own slice of the last dim    b: [dy_0 .. dy_n-1]
// Collectives are synchronous and named "<name>.f" / "<name>.b": calls on one
// name never overlap, so the names repeat every step and hit the engine's
// response cache. A group of one rank communicates nothing.
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/tensor_parallel.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::parallel {
namespace {

namespace lt = lockstep::torch;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

struct Wire {
  int id = 0, rank = 0, size = 1;
  std::string name;
};

void save(AutogradContext* ctx, const Wire& w) {
  ctx->saved_data["id"] = w.id;
  ctx->saved_data["rank"] = w.rank;
  ctx->saved_data["size"] = w.size;
  ctx->saved_data["name"] = w.name;
}

Wire load(AutogradContext* ctx) {
  return {static_cast<int>(ctx->saved_data["id"].toInt()),
          static_cast<int>(ctx->saved_data["rank"].toInt()),
          static_cast<int>(ctx->saved_data["size"].toInt()), ctx->saved_data["name"].toStringRef()};
}

Wire wire_of(const Group& group, const std::string& name, const char* what) {
  group.require_member(what);
  if (name.empty()) throw InvalidArgument(fmt::format("{}: the collective name is empty", what));
  return {group.id(), group.rank(), group.size(), name};
}

::torch::Tensor sum_over(const ::torch::Tensor& x, const Wire& w, const char* suffix) {
  if (w.size == 1) return x;
  return lt::allreduce(x, w.name + suffix, {.op = lt::ReduceOp::kSum, .process_set = w.id});
}

// Concatenation of every rank's x along the last dimension (sizes may differ).
::torch::Tensor gather_last(const ::torch::Tensor& x, const Wire& w, const char* suffix) {
  if (w.size == 1) return x;
  auto front = x.movedim(-1, 0).contiguous();
  return lt::allgather(front, w.name + suffix, w.id).movedim(0, -1);
}

// This rank's slice of x's last dimension, and the split sizes of all ranks.
::torch::Tensor own_slice(const ::torch::Tensor& x, const Wire& w) {
  if (w.size == 1) return x;
  auto [begin, length] = shard_range(x.size(-1), w.rank, w.size);
  return x.narrow(-1, begin, length).contiguous();
}

struct CopyTo : public ::torch::autograd::Function<CopyTo> {
  static ::torch::Tensor forward(AutogradContext* ctx, const ::torch::Tensor& x, Wire w) {
    save(ctx, w);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {sum_over(grads[0], load(ctx), ".b"), ::torch::Tensor()};
  }
};

struct ReduceFrom : public ::torch::autograd::Function<ReduceFrom> {
  static ::torch::Tensor forward(AutogradContext* ctx, const ::torch::Tensor& x, Wire w) {
    return sum_over(x, w, ".f").clone();
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], ::torch::Tensor()};
  }
};

struct GatherFrom : public ::torch::autograd::Function<GatherFrom> {
  static ::torch::Tensor forward(AutogradContext* ctx, const ::torch::Tensor& x, Wire w) {
    save(ctx, w);
    return gather_last(x, w, ".f").clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_slice(grads[0], load(ctx)), ::torch::Tensor()};
  }
};

struct ScatterTo : public ::torch::autograd::Function<ScatterTo> {
  static ::torch::Tensor forward(AutogradContext* ctx, const ::torch::Tensor& x, Wire w) {
    save(ctx, w);
    return own_slice(x, w).clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gather_last(grads[0], load(ctx), ".b"), ::torch::Tensor()};
  }
};

}  // namespace

std::pair<int64_t, int64_t> shard_range(int64_t size, int rank, int n) {
  if (n < 1 || rank < 0 || rank >= n)
    throw InvalidArgument(fmt::format("shard_range: rank {} of {} is out of range", rank, n));
  const int64_t base = size / n, extra = size % n;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, base + (rank < extra ? 1 : 0)};
}

::torch::Tensor copy_to_group(const ::torch::Tensor& x, const Group& group,
                              const std::string& name) {
  return CopyTo::apply(x, wire_of(group, name, "copy_to_group"));
}

::torch::Tensor reduce_from_group(const ::torch::Tensor& x, const Group& group,
                                  const std::string& name) {
  return ReduceFrom::apply(x, wire_of(group, name, "reduce_from_group"));
}

::torch::Tensor gather_from_group(const ::torch::Tensor& x, const Group& group,
                                  const std::string& name) {
  return GatherFrom::apply(x, wire_of(group, name, "gather_from_group"));
}

::torch::Tensor scatter_to_group(const ::torch::Tensor& x, const Group& group,
                                 const std::string& name) {
  return ScatterTo::apply(x, wire_of(group, name, "scatter_to_group"));
}

}  // namespace lockstep::parallel
