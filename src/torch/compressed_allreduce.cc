#include "lockstep/torch/compressed_allreduce.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/policy/compression.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

using ::torch::Tensor;

namespace {

constexpr int64_t kScaleBytes = 4;  // one f32 scale after each chunk of signs

// |x|₂ / √n: the scale that keeps the compressed vector's norm (DeepSpeed's).
Tensor rms(const Tensor& x) {
  return (x.norm() / std::sqrt(static_cast<double>(x.numel()))).reshape({1});
}

// signs of `x` and its scale as one row of bytes: [packed signs | f32 scale].
Tensor encode(const Tensor& x, const Tensor& scale) {
  return ::torch::cat(
      {pack_signs(x), scale.to(::torch::kFloat32).contiguous().view(::torch::kUInt8)});
}

// Row of encode() back to scale · sign.
Tensor decode(const Tensor& row, ::torch::ScalarType dtype) {
  const int64_t sign_bytes = row.numel() - kScaleBytes;
  const Tensor scale = row.narrow(0, sign_bytes, kScaleBytes).clone().view(::torch::kFloat32);
  return unpack_signs(row.narrow(0, 0, sign_bytes), dtype) * scale.to(dtype);
}

}  // namespace

int64_t onebit_payload_bytes(int64_t values, int ranks) {
  return policy::onebit_payload_bytes(values, ranks);  // the planner's closed form, shared
}

Tensor pack_signs(const Tensor& x) {
  if (x.numel() % 8 != 0)
    throw InvalidArgument(fmt::format("pack_signs: {} values is not a multiple of 8", x.numel()));
  const Tensor bits = x.ge(0).to(::torch::kInt32).reshape({-1, 8});
  const Tensor weights = ::torch::tensor({128, 64, 32, 16, 8, 4, 2, 1}, ::torch::kInt32);
  return (bits * weights).sum(1).to(::torch::kUInt8);
}

Tensor unpack_signs(const Tensor& packed, ::torch::ScalarType dtype) {
  const Tensor shifts = ::torch::tensor({7, 6, 5, 4, 3, 2, 1, 0}, ::torch::kInt32);
  const Tensor bits =
      packed.to(::torch::kInt32).unsqueeze(1).bitwise_right_shift(shifts).bitwise_and(1);
  return (bits.to(dtype) * 2 - 1).reshape({-1});
}

CompressedAllreduce::CompressedAllreduce(Group group, std::string name)
    : group_(std::move(group)), name_(std::move(name)) {}

Tensor CompressedAllreduce::mean(const Tensor& values) {
  const int64_t length = values.numel();
  Tensor x = values.reshape({-1}).to(::torch::kFloat32);
  x = ::torch::constant_pad_nd(x,
                               {0, policy::onebit_padded_length(length, group_.size()) - length});
  if (worker_error_.defined()) x += worker_error_;
  return padded_mean(x).narrow(0, 0, length);
}

// x (padded, this rank's, error included) -> the group's compressed mean.
Tensor CompressedAllreduce::padded_mean(const Tensor& x) {
  const int n = group_.size();
  const int64_t chunk = x.numel() / n;
  // One row per rank, [chunk/8 sign bytes | f32 scale], is the wire size
  // the planner prices (policy::onebit_payload_bytes); checked where the rows
  // are built and again on each rank's received rows.
  const int64_t row_bytes = chunk / 8 + kScaleBytes;
  LOCKSTEP_DCHECK_EQ(chunk * n, x.numel(), "1-bit: the padded length is one chunk per rank");
  LOCKSTEP_DCHECK_EQ(chunk % 8, 0, "1-bit: a chunk packs whole bytes of signs");
  const Tensor scale = rms(x);
  worker_error_ = x - scale * x.sign().add(x.eq(0).to(x.dtype()));  // sign(0) counts as +1
  // Row j: chunk j of this rank's signs and its scale, for rank j.
  std::vector<Tensor> rows;
  for (int j = 0; j < n; ++j) {
    rows.push_back(encode(x.narrow(0, j * chunk, chunk), scale));
    LOCKSTEP_DCHECK_EQ(rows.back().numel(), row_bytes, "1-bit: row for rank {} on send", j);
  }
  const Tensor received = alltoall(::torch::stack(rows), {}, name_ + ".chunks", group_.id());
  LOCKSTEP_DCHECK(received.dim() == 2 && received.size(0) == n && received.size(1) == row_bytes,
                  "1-bit: {} rows of {} bytes received, one per rank", n, row_bytes);
  Tensor y = ::torch::zeros({chunk}, x.options());
  for (int i = 0; i < n; ++i) y += decode(received[i], x.scalar_type());
  y = y / n;
  if (server_error_.defined()) y += server_error_;
  const Tensor server_row = encode(y, rms(y));
  LOCKSTEP_DCHECK_EQ(server_row.numel(), row_bytes, "1-bit: this rank's server row on send");
  server_error_ = y - decode(server_row, x.scalar_type());
  const Tensor gathered = allgather(server_row.unsqueeze(0), name_ + ".mean", group_.id());
  LOCKSTEP_DCHECK(gathered.dim() == 2 && gathered.size(0) == n && gathered.size(1) == row_bytes,
                  "1-bit: {} server rows of {} bytes gathered, one per rank", n, row_bytes);
  std::vector<Tensor> chunks;
  for (int j = 0; j < n; ++j) chunks.push_back(decode(gathered[j], x.scalar_type()));
  return ::torch::cat(chunks);
}

}  // namespace lockstep::torch
