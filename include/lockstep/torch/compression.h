// Wire compressors as values (Horovod's hvd.Compression.fp16.compress() /
// decompress()): the casts DistributedOptimizer applies to a gradient for
// Compression::kNone, kFp16 and kBf16, for a program's own collectives.
//
//   auto c = lt::Compressor::of(lt::Compression::kFp16);
//   auto [wire, ctx] = c.compress(grad / lt::size());   // divide first: the sum stays in range
//   lt::allreduce_(wire, "my.grad", {.op = lt::ReduceOp::kSum});
//   grad.copy_(c.decompress(wire, ctx));
//
// compress() returns the tensor to send and a context (the original dtype);
// decompress() casts back. kNone returns its input unchanged (no copy).
// A plain value: copyable, no state, thread-safe.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <utility>

#include "lockstep/base/error.h"
#include "lockstep/torch/distributed_optimizer.h"

namespace lockstep::torch {

class Compressor {
 public:
  struct Context {
    ::torch::ScalarType dtype = ::torch::kFloat32;  // what decompress() casts back to
  };

  // kNone, kFp16 or kBf16; the other schemes replace the allreduce itself
  // (PowerSGD, 1-bit) and are InvalidArgument here.
  static Compressor of(Compression c) {
    switch (c) {
      case Compression::kNone: return Compressor(std::nullopt);
      case Compression::kFp16: return Compressor(::torch::kFloat16);
      case Compression::kBf16: return Compressor(::torch::kBFloat16);
      default:
        throw InvalidArgument(
            "Compressor::of: only kNone, kFp16 and kBf16 are casts of one tensor; PowerSGD and "
            "the 1-bit schemes reduce all gradients together (DistributedOptimizer)");
    }
  }

  // Floating tensors only: an integer tensor goes as it is (Horovod's
  // Compression.fp16 likewise), never through a lossy half cast.
  std::pair<::torch::Tensor, Context> compress(const ::torch::Tensor& t) const {
    if (!wire_.has_value() || !t.is_floating_point() || t.scalar_type() == *wire_)
      return {t, {t.scalar_type()}};
    return {t.to(*wire_), {t.scalar_type()}};
  }
  ::torch::Tensor decompress(const ::torch::Tensor& t, const Context& ctx) const {
    return t.scalar_type() == ctx.dtype ? t : t.to(ctx.dtype);
  }
  // The dtype on the wire; empty for kNone (the tensor's own).
  std::optional<::torch::ScalarType> wire_dtype() const { return wire_; }

 private:
  explicit Compressor(std::optional<::torch::ScalarType> wire) : wire_(wire) {}
  std::optional<::torch::ScalarType> wire_;
};

}  // namespace lockstep::torch
