#include "lockstep/torch/adasum.h"

#include <fmt/format.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <span>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {
namespace {

// Horovod's guard (horovod/common/ops/adasum/adasum.h, sqrt(DBL_MIN)): a
// vector whose squared norm is below it keeps coefficient 1, which only
// guards against dividing by a zero or underflowed norm. A larger floor (lockstep had 1e-8)
// adds tiny but representable gradients where Adasum averages them.
const double kNormFloor = std::sqrt(DBL_MIN);

// out = adasum(a, b), elementwise over doubles; sequential, hence the same
// bits on every rank.
void combine(std::span<const double> a, std::span<const double> b, std::span<double> out) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa >= kNormFloor ? 1.0 - dot / (2.0 * aa) : 1.0;
  const double cb = bb >= kNormFloor ? 1.0 - dot / (2.0 * bb) : 1.0;
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
}

// The tree over ranks [lo, hi) of `rows` (one row per rank), into `out`.
void tree(const std::vector<std::span<const double>>& rows, size_t lo, size_t hi,
          std::span<double> out) {
  if (hi - lo == 1) {
    std::copy(rows[lo].begin(), rows[lo].end(), out.begin());
    return;
  }
  const size_t half = std::bit_floor(hi - lo - 1);  // power-of-two worlds: (hi - lo) / 2
  std::vector<double> left(out.size()), right(out.size());
  tree(rows, lo, lo + half, left);
  tree(rows, lo + half, hi, right);
  combine(left, right, out);
}

void check_floating(const ::torch::Tensor& t, const std::string& name) {
  if (!t.defined() || !t.is_floating_point())
    throw InvalidArgument(fmt::format("Adasum '{}': needs defined floating-point tensors", name));
}

}  // namespace

::torch::Tensor adasum_pair(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  check_floating(a, "adasum_pair");
  check_floating(b, "adasum_pair");
  if (a.numel() != b.numel())
    throw InvalidArgument(fmt::format("adasum_pair: {} against {} elements", a.numel(), b.numel()));
  ::torch::Tensor x = a.detach().to(::torch::kDouble).contiguous().flatten();
  ::torch::Tensor y = b.detach().to(::torch::kDouble).contiguous().flatten();
  ::torch::Tensor out = ::torch::empty_like(x);
  const auto n = static_cast<size_t>(x.numel());
  combine({x.data_ptr<double>(), n}, {y.data_ptr<double>(), n}, {out.data_ptr<double>(), n});
  return out.reshape(a.sizes()).to(a.scalar_type());
}

void adasum_allreduce_(std::vector<::torch::Tensor>& tensors, const std::string& name,
                       const Group& group) {
  group.require_member("adasum_allreduce_");
  if (tensors.empty() || group.size() == 1) return;
  std::vector<::torch::Tensor> flat;
  for (const auto& t : tensors) {
    check_floating(t, name);
    flat.push_back(t.detach().to(::torch::kDouble).flatten());
  }
  // One row per rank: [size, total] after the allgather.
  ::torch::Tensor gathered = allgather(::torch::cat(flat).unsqueeze(0), name, group.id());
  const int64_t total = gathered.size(1);
  const auto* base = gathered.data_ptr<double>();
  ::torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& t : tensors) {
    const auto n = static_cast<size_t>(t.numel());
    std::vector<std::span<const double>> rows;
    for (int r = 0; r < group.size(); ++r) rows.emplace_back(base + r * total + offset, n);
    ::torch::Tensor result = ::torch::empty({t.numel()}, ::torch::kDouble);
    tree(rows, 0, rows.size(), {result.data_ptr<double>(), n});
    t.copy_(result.reshape(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace lockstep::torch
