#include "lockstep/torch/onebit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "lockstep/base/error.h"
#include "lockstep/plan/compression.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

using ::torch::Tensor;

namespace {

constexpr int64_t kScaleBytes = 4;  // one f32 scale after each chunk of signs

// |x|₂ / √n: the scale that keeps the compressed vector's norm (DeepSpeed's).
Tensor rms(const Tensor& x) { return (x.norm() / std::sqrt(static_cast<double>(x.numel()))).reshape({1}); }

// signs of `x` and its scale as one row of bytes: [packed signs | f32 scale].
Tensor encode(const Tensor& x, const Tensor& scale) {
  return ::torch::cat({pack_signs(x), scale.to(::torch::kFloat32).contiguous().view(::torch::kUInt8)});
}

// Row of encode() back to scale · sign.
Tensor decode(const Tensor& row, ::torch::ScalarType dtype) {
  const int64_t sign_bytes = row.numel() - kScaleBytes;
  const Tensor scale = row.narrow(0, sign_bytes, kScaleBytes).clone().view(::torch::kFloat32);
  return unpack_signs(row.narrow(0, 0, sign_bytes), dtype) * scale.to(dtype);
}

}  // namespace

double adam_step_bound(double beta1, double beta2) {
  return std::max(1.0, (1 - beta1) / std::sqrt(1 - beta2));
}

Tensor bounded_adam_direction(const Tensor& m, double correction1, const Tensor& denom,
                              double beta1, double beta2) {
  const double bound = adam_step_bound(beta1, beta2);
  return (m / correction1).div_(denom).clamp_(-bound, bound);
}

void validate(const OneBitOptions& o) {
  if (o.warmup_steps < 0)
    throw InvalidArgument(fmt::format("1-bit compression: warmup_steps={} must be >= 0",
                                      o.warmup_steps));
}

int64_t onebit_payload_bytes(int64_t values, int ranks) {
  return plan::onebit_payload_bytes(values, ranks);  // the planner's closed form, shared
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
  const Tensor bits = packed.to(::torch::kInt32).unsqueeze(1).bitwise_right_shift(shifts).bitwise_and(1);
  return (bits.to(dtype) * 2 - 1).reshape({-1});
}

CompressedAllreduce::CompressedAllreduce(Group group, std::string name)
    : group_(std::move(group)), name_(std::move(name)) {}

Tensor CompressedAllreduce::mean(const Tensor& values) {
  const int64_t length = values.numel();
  Tensor x = values.reshape({-1}).to(::torch::kFloat32);
  x = ::torch::constant_pad_nd(x, {0, plan::onebit_padded_length(length, group_.size()) - length});
  if (worker_error_.defined()) x += worker_error_;
  return padded_mean(x).narrow(0, 0, length);
}

// x (padded, this rank's, error included) -> the group's compressed mean.
Tensor CompressedAllreduce::padded_mean(const Tensor& x) {
  const int n = group_.size();
  const int64_t chunk = x.numel() / n;
  const Tensor scale = rms(x);
  worker_error_ = x - scale * x.sign().add(x.eq(0).to(x.dtype()));  // sign(0) counts as +1
  // Row j: chunk j of this rank's signs and its scale, for rank j.
  std::vector<Tensor> rows;
  for (int j = 0; j < n; ++j) rows.push_back(encode(x.narrow(0, j * chunk, chunk), scale));
  const Tensor received =
      alltoall(::torch::stack(rows), {}, name_ + ".chunks", group_.id());
  Tensor y = ::torch::zeros({chunk}, x.options());
  for (int i = 0; i < n; ++i) y += decode(received[i], x.scalar_type());
  y = y / n;
  if (server_error_.defined()) y += server_error_;
  const Tensor server_row = encode(y, rms(y));
  server_error_ = y - decode(server_row, x.scalar_type());
  const Tensor gathered =
      allgather(server_row.unsqueeze(0), name_ + ".mean", group_.id());
  std::vector<Tensor> chunks;
  for (int j = 0; j < n; ++j) chunks.push_back(decode(gathered[j], x.scalar_type()));
  return ::torch::cat(chunks);
}

OneBit::OneBit(OneBitOptions options, Group group, std::string name_prefix)
    : options_(options),
      group_(group),
      prefix_(std::move(name_prefix)),
      compressed_(std::move(group), prefix_ + ".onebit") {
  validate(options_);
}

void OneBit::allreduce_whole(const std::vector<Tensor>& grads,
                             const std::vector<std::string>& names, bool average) {
  std::vector<TensorHandle> handles;
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor t = grads[i];
    handles.push_back(allreduce_async_(t, prefix_ + ".onebit.whole." + names[i],
                                       {.op = average ? ReduceOp::kAverage : ReduceOp::kSum,
                                        .process_set = group_.id()}));
  }
  for (auto& h : handles) h.wait();
}

void OneBit::reduce(const std::vector<Tensor>& grads, const std::vector<std::string>& names,
                    bool average) {
  if (grads.size() != names.size())
    throw InvalidArgument(fmt::format("OneBit::reduce: {} gradients but {} names", grads.size(),
                                      names.size()));
  if (grads.empty()) return;
  ::torch::NoGradGuard no_grad;
  if (steps_++ < options_.warmup_steps) return allreduce_whole(grads, names, average);
  std::vector<Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape({-1}).to(::torch::kFloat32));
  Tensor mean = compressed_.mean(::torch::cat(flat));
  if (!average) mean *= group_.size();
  int64_t offset = 0;
  for (const auto& g : grads) {
    g.copy_(mean.narrow(0, offset, g.numel()).view(g.sizes()));
    offset += g.numel();
  }
}

}  // namespace lockstep::torch
