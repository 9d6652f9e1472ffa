#include "lockstep/torch/onebit.h"

#include <fmt/format.h>

#include <utility>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

using ::torch::Tensor;

void validate(const OneBitOptions& o) {
  if (o.warmup_steps < 0)
    throw InvalidArgument(
        fmt::format("1-bit compression: warmup_steps={} must be >= 0", o.warmup_steps));
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
    handles.push_back(allreduce_async_(
        t, prefix_ + ".onebit.whole." + names[i],
        {.op = average ? ReduceOp::kAverage : ReduceOp::kSum, .process_set = group_.id()}));
  }
  for (auto& h : handles) h.wait();
}

void OneBit::reduce(const std::vector<Tensor>& grads, const std::vector<std::string>& names,
                    bool average) {
  if (grads.size() != names.size())
    throw InvalidArgument(
        fmt::format("OneBit::reduce: {} gradients but {} names", grads.size(), names.size()));
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
