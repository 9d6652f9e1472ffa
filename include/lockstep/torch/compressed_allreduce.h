// DeepSpeed's compressed allreduce (Tang et al., "1-bit Adam", ICML 2021;
// Seide et al. 2014 for 1-bit SGD): one flat vector x of L values per rank,
// averaged over the group with one bit per value:
//
//   x += worker_error                        this rank's error feedback
//   s  = |x|₂ / √L;  c = s · sign(x)        one bit per value + one scale
//   worker_error = x − c
//   alltoall: rank j receives chunk j (L/N values) of every rank's c
//   y  = mean over ranks of chunk j + server_error     (on rank j)
//   t  = |y|₂ / √(L/N);  d = t · sign(y);  server_error = y − d
//   allgather the d chunks: every rank holds the same compressed average
//
// So a call sends 2(N−1) · (L/(8N) + 4) bytes per rank, where an fp32
// allreduce sends 2(N−1)/N · 4L: about 32x less. The byte counts are
// lockstep/policy/compression.h's (shared with the planner). On the wire a
// chunk is its signs packed 8 to a byte (pack_signs) followed by its f32
// scale.
//
// Used by OneBit (onebit.h) on gradients and by OneBitAdam and OneBitLamb
// (onebit_adam.h, onebit_lamb.h) on momenta. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "lockstep/torch/group.h"

namespace lockstep::torch {

// Bytes one rank hands to the two collectives of a compressed step for L
// gradient values on `ranks` ranks (L padded to a multiple of 8 · ranks).
int64_t onebit_payload_bytes(int64_t values, int ranks);

// The scheme above, with this rank's worker error and its chunk's server
// error kept between calls. Collective over `group`: every rank calls
// mean() with the same length, in the same order.
class CompressedAllreduce {
 public:
  // `name` names the two collectives (<name>.chunks, <name>.mean).
  CompressedAllreduce(Group group, std::string name);
  // The group's compressed mean of `values` (any shape; f32 result, flat).
  ::torch::Tensor mean(const ::torch::Tensor& values);

 private:
  ::torch::Tensor padded_mean(const ::torch::Tensor& x);

  Group group_;
  std::string name_;
  ::torch::Tensor worker_error_;  // padded length
  ::torch::Tensor server_error_;  // this rank's chunk
};

// Signs (>= 0 is +1) of `x` (length a multiple of 8) packed 8 to a byte,
// most significant bit first, and back to ±1 floats.
::torch::Tensor pack_signs(const ::torch::Tensor& x);
::torch::Tensor unpack_signs(const ::torch::Tensor& packed, ::torch::ScalarType dtype);

}  // namespace lockstep::torch
