#include "lockstep/optim/weight_average.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "lockstep/base/error.h"

namespace lockstep::optim {
namespace {

// Parameters, then buffers: the tensors an average covers, in a fixed order.
std::vector<::torch::Tensor> state_tensors(const ::torch::nn::Module& module) {
  std::vector<::torch::Tensor> out = module.parameters();
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

void check_same(const std::vector<::torch::Tensor>& mine,
                const std::vector<::torch::Tensor>& theirs, const char* who) {
  if (mine.size() != theirs.size())
    throw InvalidArgument(
        fmt::format("{}: the module has {} parameters and buffers, the average "
                    "was built for {}",
                    who, theirs.size(), mine.size()));
  for (size_t i = 0; i < mine.size(); ++i)
    if (!mine[i].sizes().equals(theirs[i].sizes()))
      throw InvalidArgument(fmt::format("{}: tensor {} has shape {}, the average holds {}", who, i,
                                        fmt::streamed(theirs[i].sizes()),
                                        fmt::streamed(mine[i].sizes())));
}

std::vector<::torch::Tensor> clones(const std::vector<::torch::Tensor>& tensors) {
  std::vector<::torch::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

void save_tensors(::torch::serialize::OutputArchive& archive, const std::string& prefix,
                  const std::vector<::torch::Tensor>& tensors, int64_t count) {
  archive.write(prefix + "count", ::torch::tensor(count, ::torch::kInt64));
  for (size_t i = 0; i < tensors.size(); ++i)
    archive.write(fmt::format("{}{}", prefix, i), tensors[i], /*is_buffer=*/true);
}

int64_t load_tensors(::torch::serialize::InputArchive& archive, const std::string& prefix,
                     std::vector<::torch::Tensor>& tensors) {
  ::torch::Tensor count;
  archive.read(prefix + "count", count);
  for (size_t i = 0; i < tensors.size(); ++i) {
    ::torch::Tensor t;
    archive.read(fmt::format("{}{}", prefix, i), t, /*is_buffer=*/true);
    if (!t.sizes().equals(tensors[i].sizes()))
      throw InvalidArgument(fmt::format("{}: saved tensor {} has shape {}, expected {}", prefix, i,
                                        fmt::streamed(t.sizes()),
                                        fmt::streamed(tensors[i].sizes())));
    ::torch::NoGradGuard no_grad;
    tensors[i].copy_(t);
  }
  return count.item<int64_t>();
}

}  // namespace

void WeightEmaOptions::validate() const {
  if (!(decay >= 0 && decay < 1))
    throw InvalidArgument(fmt::format("WeightEma: decay {} must be in [0, 1)", decay));
}

WeightEma::WeightEma(const ::torch::nn::Module& module, WeightEmaOptions options)
    : options_(options) {
  options_.validate();
  averages_ = clones(state_tensors(module));
}

double WeightEma::next_decay() const {
  if (!options_.warmup) return options_.decay;
  const auto t = static_cast<double>(updates_ + 1);
  return std::min(options_.decay, (1 + t) / (10 + t));
}

void WeightEma::update(const ::torch::nn::Module& module) {
  auto current = state_tensors(module);
  check_same(averages_, current, "WeightEma::update");
  const double d = next_decay();
  ::torch::NoGradGuard no_grad;
  std::vector<::torch::Tensor> avg, cur;
  for (size_t i = 0; i < averages_.size(); ++i) {
    if (averages_[i].is_floating_point()) {
      avg.push_back(averages_[i]);
      cur.push_back(current[i].detach());
    } else {
      averages_[i].copy_(current[i]);
    }
  }
  // One fused call per list instead of a mul_ and an add_ per tensor.
  ::torch::_foreach_mul_(avg, d);
  ::torch::_foreach_add_(avg, cur, 1 - d);
  ++updates_;
}

WeightEma::Applied WeightEma::apply_to(::torch::nn::Module& module) const {
  auto current = state_tensors(module);
  check_same(averages_, current, "WeightEma::apply_to");
  std::vector<::torch::Tensor> saved = clones(current);
  copy_to(module);
  return Applied(module, std::move(saved));
}

WeightEma::Applied::~Applied() {
  if (!module_) return;
  ::torch::NoGradGuard no_grad;
  auto current = state_tensors(*module_);
  for (size_t i = 0; i < current.size() && i < saved_.size(); ++i) current[i].copy_(saved_[i]);
}

void WeightEma::copy_to(::torch::nn::Module& module) const {
  auto current = state_tensors(module);
  check_same(averages_, current, "WeightEma::copy_to");
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < current.size(); ++i) current[i].copy_(averages_[i]);
}

void WeightEma::save(::torch::serialize::OutputArchive& archive) const {
  save_tensors(archive, "weight_ema.", averages_, updates_);
}

void WeightEma::load(::torch::serialize::InputArchive& archive) {
  updates_ = load_tensors(archive, "weight_ema.", averages_);
}

void LookaheadOptions::validate() const {
  if (k < 1) throw InvalidArgument(fmt::format("Lookahead: k {} must be >= 1", k));
  if (!(alpha > 0 && alpha <= 1))
    throw InvalidArgument(fmt::format("Lookahead: alpha {} must be in (0, 1]", alpha));
}

Lookahead::Lookahead(std::vector<::torch::Tensor> parameters, LookaheadOptions options)
    : options_(options), fast_(std::move(parameters)) {
  options_.validate();
  slow_ = clones(fast_);
}

bool Lookahead::after_step() {
  if (++steps_ % options_.k != 0) return false;
  ::torch::NoGradGuard no_grad;
  std::vector<::torch::Tensor> fast;
  fast.reserve(fast_.size());
  for (auto& f : fast_) fast.push_back(f.detach());
  // slow += alpha * (fast - slow), then fast = slow.
  ::torch::_foreach_mul_(slow_, 1 - options_.alpha);
  ::torch::_foreach_add_(slow_, fast, options_.alpha);
  for (size_t i = 0; i < fast.size(); ++i) fast[i].copy_(slow_[i]);
  return true;
}

void Lookahead::save(::torch::serialize::OutputArchive& archive) const {
  save_tensors(archive, "lookahead.", slow_, steps_);
}

void Lookahead::load(::torch::serialize::InputArchive& archive) {
  steps_ = load_tensors(archive, "lookahead.", slow_);
}

}  // namespace lockstep::optim
