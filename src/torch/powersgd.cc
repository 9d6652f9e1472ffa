#include "lockstep/torch/powersgd.h"

#include <fmt/format.h>

#include <span>
#include <utility>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/policy/compression.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

using ::torch::Tensor;

void validate(const PowerSGDOptions& o) {
  if (o.rank < 1) throw InvalidArgument(fmt::format("PowerSGD: rank={} must be >= 1", o.rank));
  if (o.warmup_steps < 0)
    throw InvalidArgument(fmt::format("PowerSGD: warmup_steps={} must be >= 0", o.warmup_steps));
  if (!(o.min_compression_rate >= 1))
    throw InvalidArgument(
        fmt::format("PowerSGD: min_compression_rate={} must be >= 1", o.min_compression_rate));
}

namespace {

// The planner's rule (lockstep/policy/compression.h), shared so that its
// bytes are these.
policy::PowerSGDMatrix matrix_shape(at::IntArrayRef shape, const PowerSGDOptions& o) {
  return policy::powersgd_matrix(std::span<const int64_t>(shape.data(), shape.size()), o.rank,
                                 o.min_compression_rate);
}

// Tensors of several dtypes go in one grouped allreduce per dtype (the
// engine fuses a group of one dtype); every handle is waited before return.
void allreduce_all(std::vector<Tensor>& tensors, const std::vector<std::string>& names,
                   AllreduceOptions options) {
  std::map<::torch::ScalarType, std::pair<std::vector<Tensor>, std::vector<std::string>>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& [ts, ns] = groups[tensors[i].scalar_type()];
    ts.push_back(tensors[i]);
    ns.push_back(names[i]);
  }
  std::vector<TensorHandle> handles;
  for (auto& [dtype, group] : groups)
    handles.push_back(grouped_allreduce_async_(group.first, group.second, options));
  for (auto& h : handles) h.wait();
}

}  // namespace

int64_t powersgd_wire_elements(at::IntArrayRef shape, const PowerSGDOptions& options) {
  const policy::PowerSGDMatrix s = matrix_shape(shape, options);
  return s.compressed ? (s.n + s.m) * s.r : c10::multiply_integers(shape);
}

void orthonormalize_columns_(Tensor& p) {
  ::torch::NoGradGuard no_grad;
  const int64_t r = p.size(1);
  for (int64_t i = 0; i < r; ++i) {
    Tensor col = p.select(1, i);
    const double norm = col.norm().item<double>();
    if (norm > 0) col.div_(norm);
    if (i + 1 == r) break;
    Tensor rest = p.narrow(1, i + 1, r - i - 1);
    rest.sub_(col.unsqueeze(1) * col.matmul(rest).unsqueeze(0));
  }
}

PowerSGD::PowerSGD(PowerSGDOptions options, Group group, std::string name_prefix)
    : options_(options), group_(std::move(group)), prefix_(std::move(name_prefix)) {
  validate(options_);
}

bool PowerSGD::compressed(const Tensor& grad) const {
  return matrix_shape(grad.sizes(), options_).compressed;
}

void PowerSGD::allreduce_whole(const std::vector<Tensor>& grads,
                               const std::vector<std::string>& names, bool average) {
  std::vector<Tensor> tensors = grads;
  std::vector<std::string> wire_names;
  for (const auto& n : names) wire_names.push_back(prefix_ + "." + n + ".whole");
  allreduce_all(tensors, wire_names,
                {.op = average ? ReduceOp::kAverage : ReduceOp::kSum, .process_set = group_.id()});
}

void PowerSGD::reduce(const std::vector<Tensor>& grads, const std::vector<std::string>& names,
                      bool average) {
  if (grads.size() != names.size())
    throw InvalidArgument(
        fmt::format("PowerSGD::reduce: {} gradients but {} names", grads.size(), names.size()));
  ::torch::NoGradGuard no_grad;
  const int64_t step = steps_++;
  if (step < options_.warmup_steps) return allreduce_whole(grads, names, average);
  // Phase 1: P = (M + error) Q for the compressed, whole tensors for the rest.
  std::vector<Tensor> first, matrices, ps, targets;
  std::vector<std::string> first_names;
  std::vector<State*> states;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!compressed(grads[i])) {
      first.push_back(grads[i]);
      first_names.push_back(prefix_ + "." + names[i] + ".whole");
      continue;
    }
    const policy::PowerSGDMatrix s = matrix_shape(grads[i].sizes(), options_);
    State& st = state_[names[i]];
    Tensor m = grads[i].reshape({s.n, s.m});  // a view when contiguous; written back below
    if (st.error.defined()) m.add_(st.error);
    if (!st.q.defined() || !options_.warm_start) {
      // Seeded by step too without warm start: a fresh Q, equal on every rank.
      auto gen = at::make_generator<at::CPUGeneratorImpl>(
          options_.seed + (options_.warm_start ? 0 : static_cast<uint64_t>(step)) * 1000003u + i);
      st.q = ::torch::randn({s.m, s.r}, gen, grads[i].options().device(::torch::kCPU))
                 .to(grads[i].device());
    }
    ps.push_back(m.matmul(st.q));
    // P is [n, r] and (below) Q is [m, r] of policy::powersgd_matrix: the
    // shapes the planner prices, checked before each allreduce and after.
    LOCKSTEP_DCHECK(ps.back().size(0) == s.n && ps.back().size(1) == s.r,
                    "PowerSGD: P of {} is [{}, {}] before its allreduce", names[i], s.n, s.r);
    first.push_back(ps.back());
    first_names.push_back(prefix_ + "." + names[i] + ".p");
    matrices.push_back(m);
    targets.push_back(grads[i]);
    states.push_back(&st);
  }
  // P's scale does not matter (it is orthonormalized), so one reduction op for all.
  const AllreduceOptions op{.op = average ? ReduceOp::kAverage : ReduceOp::kSum,
                            .process_set = group_.id()};
  allreduce_all(first, first_names, op);
  if (matrices.empty()) return;
  // Phase 2: Q = M^T P with P orthonormal, reduced; M' = P Q^T.
  std::vector<Tensor> qs;
  std::vector<std::string> q_names;
  for (size_t k = 0; k < matrices.size(); ++k) {
    orthonormalize_columns_(ps[k]);
    qs.push_back(matrices[k].t().matmul(ps[k]));
    LOCKSTEP_DCHECK(qs.back().size(0) == matrices[k].size(1) && qs.back().size(1) == ps[k].size(1),
                    "PowerSGD: Q of matrix {} is [m, r] before its allreduce", k);
  }
  for (size_t i = 0; i < grads.size(); ++i)
    if (compressed(grads[i])) q_names.push_back(prefix_ + "." + names[i] + ".q");
  allreduce_all(qs, q_names, op);
  for (size_t k = 0; k < matrices.size(); ++k) {
    LOCKSTEP_DCHECK_EQ(ps[k].numel() + qs[k].numel(),
                       powersgd_wire_elements(targets[k].sizes(), options_),
                       "PowerSGD: P and Q after their allreduces are what the planner prices");
    Tensor approx = ps[k].matmul(qs[k].t());
    states[k]->error = matrices[k] - approx;
    states[k]->q = qs[k];
    targets[k].copy_(approx.view(targets[k].sizes()));
  }
}

}  // namespace lockstep::torch
