// SameBitsStep: Note [Same bits at any world size] in
// include/lockstep/torch/same_bits.h.
#include "lockstep/torch/same_bits.h"

#include <fmt/format.h>

#include <cmath>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/sync_batch_norm.h"

namespace lockstep::torch {
// Named, because the unity build puts several files in one translation unit.
namespace same_bits_impl {
namespace {

// A BatchNorm layer's running statistics, whatever its rank.
struct BatchNormRef {
  std::string name;
  ::torch::Tensor running_mean, running_var, num_batches_tracked;
  double momentum = 0.1;
  c10::optional<double>* momentum_option = nullptr;
};

template <class Impl>
bool add_batch_norm(const std::string& name, ::torch::nn::Module& m,
                    std::vector<BatchNormRef>& out) {
  auto* bn = dynamic_cast<Impl*>(&m);
  if (bn == nullptr) return false;
  if (!bn->options.track_running_stats()) return true;
  if (!bn->options.momentum().has_value())
    throw InvalidArgument(fmt::format(
        "SameBitsStep: BatchNorm '{}' has momentum None (a cumulative average); give it a "
        "numeric momentum (e.g. 0.1)",
        name));
  out.push_back({name, bn->running_mean, bn->running_var, bn->num_batches_tracked,
                 *bn->options.momentum(), &bn->options.momentum()});
  return true;
}

void refuse_module(const std::string& name, ::torch::nn::Module& m) {
  const char* what = nullptr;
  if (dynamic_cast<SyncBatchNormImpl*>(&m)) what = "SyncBatchNorm";
  // By name: ghost_batch_norm.h cannot be included after lockstep::torch is
  // declared (its TORCH_MODULE says torch::nn unqualified) in a unity build.
  if (m.name().find("GhostBatchNorm") != std::string::npos) what = "GhostBatchNorm";
  if (what != nullptr)
    throw InvalidArgument(
        fmt::format("SameBitsStep: module '{}' is a {}, which same-bits mode refuses; use "
                    "torch::nn::BatchNorm: each micro-batch is already a ghost batch of its size",
                    name, what));
}

std::vector<BatchNormRef> batch_norms(::torch::nn::Module& model) {
  std::vector<BatchNormRef> out;
  auto visit = [&out](const std::string& name, ::torch::nn::Module& m) {
    refuse_module(name, m);
    if (!m.is_training()) return;
    add_batch_norm<::torch::nn::BatchNorm1dImpl>(name, m, out) ||
        add_batch_norm<::torch::nn::BatchNorm2dImpl>(name, m, out) ||
        add_batch_norm<::torch::nn::BatchNorm3dImpl>(name, m, out);
  };
  // The root apart: named_modules() can include it only when it is held by
  // a shared_ptr, which a model on the stack is not.
  visit("(the model)", model);
  for (auto& item : model.named_modules("", /*include_self=*/false))
    visit(item.key(), *item.value());
  return out;
}

void check_parameters(::torch::nn::Module& model) {
  for (auto& item : model.named_parameters()) {
    const auto& p = item.value();
    if (p.scalar_type() != ::torch::kFloat32 || !p.device().is_cpu() ||
        (p.numel() > 0 && p.data_ptr() == nullptr))
      throw InvalidArgument(
          fmt::format("SameBitsStep: parameter '{}' is {} on {}; same-bits mode supports f32 CPU "
                      "parameters that hold their memory (not FSDP/ZeRO shards)",
                      item.key(), std::string(c10::toString(p.scalar_type())), p.device().str()));
  }
}

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 step
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

void seed_stream(uint64_t seed, int64_t step, int64_t index) {
  ::torch::manual_seed(mix(mix(seed, static_cast<uint64_t>(step)), static_cast<uint64_t>(index)));
}

int ceil_log2(int64_t k) {
  int bits = 0;
  while ((int64_t{1} << bits) < k) ++bits;
  return bits;
}

// One parameter that gets a gradient, and where it sits in the flat rows.
struct Slot {
  std::string name;
  ::torch::Tensor param;
  int64_t offset = 0;
};

std::vector<Slot> trainable(::torch::nn::Module& model, int64_t& total) {
  std::vector<Slot> slots;
  total = 0;
  for (auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    slots.push_back({item.key(), item.value(), total});
    total += item.value().numel();
  }
  return slots;
}

// Per tensor t, e_t with max-abs M_t < 2^e_t over all K micro-batches (one
// fused MAX allreduce); throws on every rank alike when a gradient is not
// finite, since every rank sees the same maxima.
std::vector<int> global_exponents(const ::torch::Tensor& grads, const std::vector<Slot>& slots) {
  auto maxes = ::torch::zeros({static_cast<int64_t>(slots.size())}, ::torch::kFloat32);
  for (size_t t = 0; t < slots.size(); ++t) {
    const int64_t n = slots[t].param.numel();
    if (n > 0 && grads.size(0) > 0) maxes[t] = grads.narrow(1, slots[t].offset, n).abs().max();
  }
  AllreduceOptions max_op;
  max_op.op = ReduceOp::kMax;
  allreduce_(maxes, "same_bits.maxabs", max_op);
  std::vector<int> exponents(slots.size());
  for (size_t t = 0; t < slots.size(); ++t) {
    const double m = maxes[t].item<double>();
    if (!std::isfinite(m))
      throw Error(fmt::format(
          "SameBitsStep: the gradient of '{}' is not finite (max-abs {}) in some micro-batch; "
          "lower the learning rate or check the loss",
          slots[t].name, m));
    std::frexp(m, &exponents[t]);
  }
  return exponents;
}

// One f64 factor per flat element: 2^(shift_sign * (k - e_t)).
::torch::Tensor factor_row(const std::vector<Slot>& slots, int64_t total,
                           const std::vector<int>& exponents, int k, int sign) {
  auto row = ::torch::empty({total}, ::torch::kFloat64);
  for (size_t t = 0; t < slots.size(); ++t)
    row.narrow(0, slots[t].offset, slots[t].param.numel())
        .fill_(std::ldexp(1.0, sign * (k - exponents[t])));
  return row;
}

// grads: [local, P] f32, this rank's micro-batches. Sets every slot's .grad
// to the mean over all K micro-batches, bitwise the same for any world size.
void set_exact_mean(const ::torch::Tensor& grads, const std::vector<Slot>& slots, int64_t total,
                    int64_t micro_batches) {
  const int k = 62 - ceil_log2(micro_batches);  // K * 2^k <= 2^62: no overflow
  const auto exponents = global_exponents(grads, slots);
  auto ints = (grads.to(::torch::kFloat64) * factor_row(slots, total, exponents, k, 1))
                  .round()
                  .to(::torch::kInt64);
  auto sum = ints.sum(0);  // int64: exact
  AllreduceOptions sum_op;
  sum_op.op = ReduceOp::kSum;
  allreduce_(sum, "same_bits.grad", sum_op);
  auto mean = (sum.to(::torch::kFloat64) * factor_row(slots, total, exponents, k, -1) /
               static_cast<double>(micro_batches))
                  .to(::torch::kFloat32);
  for (const auto& slot : slots)
    slot.param.mutable_grad() =
        mean.narrow(0, slot.offset, slot.param.numel()).view(slot.param.sizes()).clone();
}

// Running statistics from the micro-batches' batch statistics, in order
// 0..K-1 (rows of `all`, columns laid out as in collect_statistics).
void apply_running_stats(const std::vector<BatchNormRef>& bns, const ::torch::Tensor& all) {
  int64_t column = 0;
  for (const auto& bn : bns) {
    const int64_t c = bn.running_mean.numel();
    const float m = static_cast<float>(bn.momentum);
    ::torch::NoGradGuard no_grad;
    for (int64_t j = 0; j < all.size(0); ++j) {
      auto mean = all[j].narrow(0, column, c).to(::torch::kFloat32);
      auto var = all[j].narrow(0, column + c, c).to(::torch::kFloat32);
      bn.running_mean.copy_(bn.running_mean * (1.0f - m) + mean * m);
      bn.running_var.copy_(bn.running_var * (1.0f - m) + var * m);
    }
    bn.num_batches_tracked.add_(all.size(0));
    column += 2 * c;
  }
}

int64_t statistics_width(const std::vector<BatchNormRef>& bns) {
  int64_t width = 0;
  for (const auto& bn : bns) width += 2 * bn.running_mean.numel();
  return width;
}

// After a micro-batch's forward with momentum 1, the running stats hold its
// batch statistics exactly: copy them into `row` and restore the step-start
// values.
void collect_statistics(const std::vector<BatchNormRef>& bns,
                        const std::vector<std::vector<::torch::Tensor>>& saved,
                        ::torch::Tensor row) {
  ::torch::NoGradGuard no_grad;
  int64_t column = 0;
  for (size_t b = 0; b < bns.size(); ++b) {
    const int64_t c = bns[b].running_mean.numel();
    row.narrow(0, column, c).copy_(bns[b].running_mean);
    row.narrow(0, column + c, c).copy_(bns[b].running_var);
    bns[b].running_mean.copy_(saved[b][0]);
    bns[b].running_var.copy_(saved[b][1]);
    bns[b].num_batches_tracked.copy_(saved[b][2]);
    column += 2 * c;
  }
}

void set_momentum(const std::vector<BatchNormRef>& bns, bool collecting) {
  for (const auto& bn : bns) *bn.momentum_option = collecting ? 1.0 : bn.momentum;
}

}  // namespace
}  // namespace same_bits_impl

std::vector<int64_t> same_bits_world_sizes(int64_t micro_batches) {
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= micro_batches; ++n)
    if (micro_batches % n == 0) sizes.push_back(n);
  return sizes;
}

SameBitsStep::SameBitsStep(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                           SameBitsOptions options)
    : model_(model), optimizer_(optimizer), options_(options) {
  const int64_t k = options_.micro_batches;
  if (k < 1 || k > (int64_t{1} << 20))
    throw InvalidArgument(
        fmt::format("SameBitsStep: micro_batches is {}; give 1 .. 2^20 micro-batches per step", k));
  if (k % size() != 0)
    throw InvalidArgument(fmt::format(
        "SameBitsStep: {} micro-batches cannot be split evenly over {} workers; same-bits "
        "mode supports the world sizes that divide K: {}",
        k, size(), fmt::join(same_bits_world_sizes(k), ", ")));
  if (options_.intra_op_threads < 1)
    throw InvalidArgument("SameBitsStep: intra_op_threads must be >= 1");
  same_bits_impl::check_parameters(model_);
  same_bits_impl::batch_norms(model_);  // refusals before any step
  ::torch::set_num_threads(options_.intra_op_threads);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

int64_t SameBitsStep::local_micro_batches() const { return options_.micro_batches / size(); }
int64_t SameBitsStep::first_micro_batch() const { return rank() * local_micro_batches(); }

double SameBitsStep::step(const MicroBatchLoss& loss) {
  int64_t total = 0;
  const auto slots = same_bits_impl::trainable(model_, total);
  const auto bns = same_bits_impl::batch_norms(model_);
  std::vector<std::vector<::torch::Tensor>> saved;
  for (const auto& bn : bns)
    saved.push_back(
        {bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()});
  const int64_t local = local_micro_batches(), k = options_.micro_batches;
  const int64_t width = same_bits_impl::statistics_width(bns);
  auto grads = ::torch::zeros({local, total}, ::torch::kFloat32);
  auto stats = ::torch::zeros({local, width + 1}, ::torch::kFloat64);  // last column: loss
  same_bits_impl::set_momentum(bns, true);
  try {
    for (int64_t jl = 0; jl < local; ++jl) {
      const MicroBatch micro{steps_done_, first_micro_batch() + jl, k};
      same_bits_impl::seed_stream(options_.seed, micro.step, micro.index);
      for (const auto& slot : slots) slot.param.mutable_grad() = ::torch::Tensor();
      auto value = loss(micro);
      if (!value.defined() || value.numel() != 1)
        throw InvalidArgument("SameBitsStep::step: the loss callback must return a scalar");
      value.backward();
      stats[jl][width] = value.item<double>();
      for (const auto& slot : slots)
        if (slot.param.grad().defined())
          grads[jl].narrow(0, slot.offset, slot.param.numel()).copy_(slot.param.grad().flatten());
      same_bits_impl::collect_statistics(bns, saved, stats[jl].narrow(0, 0, width));
    }
  } catch (...) {
    same_bits_impl::set_momentum(bns, false);
    throw;
  }
  same_bits_impl::set_momentum(bns, false);
  same_bits_impl::set_exact_mean(grads, slots, total, k);
  const auto all = allgather(stats, "same_bits.stats");  // [K, width + 1], micro-batch order
  same_bits_impl::apply_running_stats(bns, all.narrow(1, 0, width));
  optimizer_.step();
  same_bits_impl::seed_stream(options_.seed, steps_done_, k);
  ++steps_done_;
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += all[j][width].item<double>();
  return sum / static_cast<double>(k);
}

}  // namespace lockstep::torch
