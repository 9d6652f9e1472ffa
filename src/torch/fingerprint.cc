#include "lockstep/torch/fingerprint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {
namespace {

constexpr int kFields = 3;  // numel, sum, norm (as doubles on the wire)

std::string describe(const ParameterFingerprint& f) {
  return fmt::format("sum {:.7g}, norm {:.7g} over {} values", f.sum, f.norm, f.numel);
}

// What to call: broadcast_parameters() works over the world only; a group's
// replicas (tensor shards, pipeline stages) broadcast over the group.
std::string remedy(const Group& group) {
  const char* where =
      "after building the model or loading a checkpoint and before training (docs/torch.md, "
      "\"Parameter fingerprints\")";
  if (group.is_world())
    return fmt::format(
        "call lockstep::torch::broadcast_parameters(model, 0) (and "
        "broadcast_optimizer_state(optimizer, 0)) {}",
        where);
  return fmt::format(
      "build every replica in the group from the same seed, or broadcast each parameter from "
      "one of them (lockstep::torch::broadcast_(param, {}, name, group.id())), {}",
      group.global_rank(0), where);
}

ParameterFingerprint row(const ::torch::Tensor& all, int64_t r) {
  auto a = all.accessor<double, 2>();
  return {static_cast<int64_t>(a[r][0]), a[r][1], a[r][2]};
}

}  // namespace

ParameterFingerprint fingerprint_of(const ::torch::Tensor& tensor) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor t = tensor.detach();
  if (!t.is_floating_point()) t = t.to(::torch::kDouble);
  if (t.numel() == 0) return {};
  // Accumulated in double: the summation order (thread count) then moves the
  // result by ~1e-15 of it, far below the tolerance.
  return {t.numel(), t.sum(::torch::kDouble).item<double>(),
          ::torch::linalg_vector_norm(t, 2, c10::nullopt, false, ::torch::kDouble).item<double>()};
}

bool fingerprints_agree(const ParameterFingerprint& a, const ParameterFingerprint& b) {
  if (a.numel != b.numel) return false;
  auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  if (!std::isfinite(a.norm) || !std::isfinite(b.norm))  // inf/NaN weights: only as they are
    return same(a.sum, b.sum) && same(a.norm, b.norm);
  const double scale = std::max(a.norm, b.norm);
  // |sum| <= sqrt(numel) * norm bounds how far rounding can move the sum.
  const double sum_scale = scale * std::sqrt(static_cast<double>(std::max<int64_t>(a.numel, 1)));
  return std::abs(a.norm - b.norm) <= kFingerprintTolerance * scale &&
         std::abs(a.sum - b.sum) <= kFingerprintTolerance * sum_scale;
}

void check_parameters_agree(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                            const std::string& what, const Group& group) {
  check_parameters_agree(named, what, group, remedy(group));
}

void check_parameters_agree(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                            const std::string& what, const Group& group,
                            const std::string& advice) {
  group.require_member("check_parameters_agree");
  const int members = group.size();
  if (members == 1) return;
  const int64_t count = static_cast<int64_t>(named.size());
  ::torch::Tensor mine = ::torch::empty({count, kFields}, ::torch::kDouble);
  auto m = mine.accessor<double, 2>();
  for (int64_t i = 0; i < count; ++i) {
    ParameterFingerprint f = fingerprint_of(named[static_cast<size_t>(i)].second);
    m[i][0] = static_cast<double>(f.numel);
    m[i][1] = f.sum;
    m[i][2] = f.norm;
  }
  ::torch::Tensor all = allgather(mine, "lockstep.parameter_fingerprint", group.id());
  const std::string when = what.empty() ? "" : " " + what;
  if (all.size(0) != count * members)
    throw MismatchError(fmt::format(
        "parameter fingerprint{}: ranks of group {} pass different numbers of parameters ({} on "
        "rank {}, {} in total over {} ranks); every rank must build the same model",
        when, group.describe(), count, rank(), all.size(0), members));
  for (int64_t i = 0; i < count; ++i) {
    const ParameterFingerprint ref = row(all, i);
    for (int r = 1; r < members; ++r) {
      const ParameterFingerprint other = row(all, r * count + i);
      if (fingerprints_agree(ref, other)) continue;
      throw MismatchError(fmt::format(
          "parameters differ across ranks{}{}: '{}' (the first of {} that differs) has {} on rank "
          "{} but {} on rank {}. The ranks train different models: {}",
          group.is_world() ? "" : " of group " + group.describe(), when,
          named[static_cast<size_t>(i)].first, count, describe(ref), group.global_rank(0),
          describe(other), group.global_rank(r), advice));
    }
  }
}

}  // namespace lockstep::torch
