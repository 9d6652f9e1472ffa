#include "lockstep/torch/onebit_lamb.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "lockstep/base/error.h"
#include "lockstep/optim/state_key.h"

namespace lockstep::torch {

using optim::LambOptions;
using optim::LambParamState;
using ::torch::Tensor;

void validate(const OneBitLambOptions& o) {
  auto fail = [](const std::string& what) { throw InvalidArgument("1-bit LAMB: " + what); };
  if (o.warmup_steps < 1)
    fail(
        fmt::format("warmup_steps={} must be >= 1 (the variance and trust ratios it freezes "
                    "come from the warm-up's uncompressed steps)",
                    o.warmup_steps));
  if (!(o.coeff_beta >= 0 && o.coeff_beta < 1))
    fail(fmt::format("coeff_beta={} must be in [0, 1)", o.coeff_beta));
  if (!(o.factor_min > 0 && o.factor_min <= 1))
    fail(fmt::format("factor_min={} must be in (0, 1]", o.factor_min));
  if (!(o.factor_max >= 1 && std::isfinite(o.factor_max)))
    fail(fmt::format("factor_max={} must be a finite number >= 1", o.factor_max));
  if (!(o.factor_threshold >= 0 && std::isfinite(o.factor_threshold)))
    fail(fmt::format("factor_threshold={} must be a finite number >= 0", o.factor_threshold));
}

// One parameter's state beside Lamb's (not saved; see the header).
struct OneBitLamb::Layer {
  Tensor param;
  size_t group = 0;           // index into Lamb's param_groups()
  int64_t counted_step = 0;   // Lamb's step whose trust ratio is in the average
  Tensor trust_sum;           // Σ (1 − β) β^k c over counted steps (0-dim)
  Tensor trust_weight;        // Σ (1 − β) β^k: the average is sum / weight
  Tensor trust;               // applied by the last step
  Tensor frozen_trust;        // c̄, from the freeze on
  Tensor fresh_v;             // v_fresh
  Tensor last_factor;         // r of the last step
  Tensor live;                // v > 0 (0/1), if some element of v is 0
  double momentum_scale = 1;  // s_i
};

namespace {

// The Lamb state of p, or null before Lamb's first step on it.
LambParamState* lamb_state_of(optim::Lamb& lamb, const Tensor& p) {
  auto it = lamb.state().find(optim::state_key(p));
  return it == lamb.state().end() ? nullptr : static_cast<LambParamState*>(it->second.get());
}

LambParamState& compressed_state_of(optim::Lamb& lamb, const Tensor& p) {
  LambParamState* s = lamb_state_of(lamb, p);
  if (s == nullptr)
    throw InvalidArgument(
        "1-bit LAMB: a parameter has no LAMB state after the warm-up (added to the optimizer "
        "late?); every parameter needs the warm-up's variance");
  return *s;
}

double scalar_of(const Tensor& t) { return t.defined() ? t.item<double>() : 0.0; }

}  // namespace

OneBitLamb::OneBitLamb(optim::Lamb& lamb, OneBitLambOptions options, Group group,
                       std::string name_prefix)
    : lamb_(lamb),
      options_(options),
      ranks_(group.size()),
      momentum_(std::move(group), name_prefix + ".onebit_lamb") {
  validate(options_);
  for (size_t g = 0; g < lamb_.param_groups().size(); ++g)
    for (const auto& p : lamb_.param_groups()[g].params()) {
      Layer& layer = layers_.emplace_back();
      layer.param = p;
      layer.group = g;
    }
}

OneBitLamb::~OneBitLamb() = default;

const LambOptions& OneBitLamb::options_of(const Layer& layer) const {
  return static_cast<const LambOptions&>(lamb_.param_groups()[layer.group].options());
}

bool OneBitLamb::compressing() const {
  for (const auto& layer : layers_)
    if (const LambParamState* s = lamb_state_of(lamb_, layer.param))
      return s->step() >= options_.warmup_steps;
  return false;  // no step taken yet
}

void OneBitLamb::step() {
  size_t params = 0;
  for (const auto& g : lamb_.param_groups()) params += g.params().size();
  if (params != layers_.size())
    throw InvalidArgument(fmt::format(
        "1-bit LAMB: the Lamb it wraps now has {} parameters, {} when it was wrapped; add "
        "parameter groups before wrapping",
        params, layers_.size()));
  ::torch::NoGradGuard no_grad;
  if (ranks_ == 1 || !compressing()) {  // one rank: nothing to send, plain LAMB
    warmup_step();
    return;
  }
  if (!frozen_) freeze();
  compressed_step();
}

// Lamb's own step, then each trust ratio it applied into the average c̄.
void OneBitLamb::warmup_step() {
  lamb_.step();
  const double beta = options_.coeff_beta;
  for (auto& layer : layers_) {
    const LambParamState* s = lamb_state_of(lamb_, layer.param);
    if (s == nullptr || !s->trust_ratio().defined() || s->step() == layer.counted_step) continue;
    layer.counted_step = s->step();  // a parameter Lamb skipped keeps its old ratio: not again
    const Tensor c = s->trust_ratio();
    layer.trust = c;
    if (!layer.trust_sum.defined()) {
      layer.trust_sum = ::torch::zeros_like(c);
      layer.trust_weight = ::torch::zeros_like(c);
    }
    // DeepSpeed leaves out ratios of exactly 1: a zero norm, not a measurement.
    const Tensor counted = c.ne(1);
    layer.trust_sum =
        ::torch::where(counted, beta * layer.trust_sum + (1 - beta) * c, layer.trust_sum);
    layer.trust_weight =
        ::torch::where(counted, beta * layer.trust_weight + (1 - beta), layer.trust_weight);
  }
}

// At the first compressed step: the momentum scales s_i (every tensor's
// momentum to the mean rms), c̄, v_fresh = v, r = 1 and where v is 0 (see
// the header).
void OneBitLamb::freeze() {
  std::vector<double> rms;
  double total = 0;
  for (auto& layer : layers_) {
    const LambParamState& s = compressed_state_of(lamb_, layer.param);
    const int64_t n = s.exp_avg().numel();
    rms.push_back(n > 0 ? scalar_of(s.exp_avg().norm()) / std::sqrt(static_cast<double>(n)) : 0.0);
    total += rms.back();
  }
  const double united = total / static_cast<double>(std::max<size_t>(1, rms.size()));
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = layers_[i];
    LambParamState& s = compressed_state_of(lamb_, layer.param);
    layer.momentum_scale = rms[i] > 0 ? united / rms[i] : 1.0;
    layer.fresh_v = s.exp_avg_sq().clone();
    layer.last_factor = ::torch::ones({}, s.exp_avg_sq().options());
    const Tensor live = s.exp_avg_sq().gt(0);
    if (!live.all().item<bool>()) layer.live = live.to(s.exp_avg().scalar_type());
    if (layer.trust_weight.defined()) {  // the warm-up ran here: its average
      layer.frozen_trust =
          ::torch::where(layer.trust_weight.gt(0), layer.trust_sum / layer.trust_weight,
                         ::torch::ones_like(layer.trust_weight));
    } else {  // resumed past the warm-up: what exact LAMB would apply now
      const LambOptions& o = options_of(layer);
      double c1 = 1, c2 = 1;
      if (o.bias_correction()) {
        c1 = 1 - std::pow(o.beta1(), static_cast<double>(s.step()));
        c2 = 1 - std::pow(o.beta2(), static_cast<double>(options_.warmup_steps));
      }
      Tensor u = (s.exp_avg() / c1) / ((s.exp_avg_sq() / c2).sqrt() + o.eps());
      if (o.weight_decay() != 0) u.add_(layer.param, o.weight_decay());
      layer.frozen_trust = optim::lamb_trust_ratio(layer.param, u, o);
    }
  }
  frozen_ = true;
}

// Momenta from local gradients, scaled; one compressed mean of all of them;
// unscaled, then each tensor's update (see the header).
void OneBitLamb::compressed_step() {
  std::vector<Tensor> momenta, previous;
  for (auto& layer : layers_) {
    LambParamState& s = compressed_state_of(lamb_, layer.param);
    const LambOptions& o = options_of(layer);
    const Tensor grad =
        layer.param.grad().defined() ? layer.param.grad() : ::torch::zeros_like(layer.param);
    previous.push_back(s.exp_avg().clone());
    s.exp_avg().mul_(o.beta1()).add_(grad, 1 - o.beta1());
    if (layer.live.defined()) s.exp_avg().mul_(layer.live);
    momenta.push_back((s.exp_avg() * layer.momentum_scale).reshape({-1}));
  }
  if (layers_.empty()) return;
  const Tensor mean = momentum_.mean(::torch::cat(momenta));
  int64_t offset = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    LambParamState& s = compressed_state_of(lamb_, layers_[i].param);
    Tensor m = s.exp_avg();
    m.copy_(mean.narrow(0, offset, m.numel()).view(m.sizes()) / layers_[i].momentum_scale);
    // Signs carry no zero: where v is 0 the compressed mean is noise, and
    // 1/ε would amplify it into the update.
    if (layers_[i].live.defined()) m.mul_(layers_[i].live);
    offset += m.numel();
    s.step(s.step() + 1);
    update(layers_[i], s, previous[i]);
  }
}

void OneBitLamb::update(Layer& layer, LambParamState& s, const Tensor& previous_m) {
  const LambOptions& o = options_of(layer);
  const Tensor& m = s.exp_avg();
  const Tensor implied = (m - previous_m * o.beta1()) / (1 - o.beta1());
  layer.fresh_v.mul_(o.beta2()).addcmul_(implied, implied, 1 - o.beta2());
  double c1 = 1, c2 = 1, c2_fresh = 1;
  if (o.bias_correction()) {
    const auto t = static_cast<double>(s.step());
    c1 = 1 - std::pow(o.beta1(), t);
    c2 = 1 - std::pow(o.beta2(), static_cast<double>(options_.warmup_steps));
    c2_fresh = 1 - std::pow(o.beta2(), t);
  }
  const Tensor denom = (s.exp_avg_sq() / c2).sqrt() + o.eps();
  // The frozen c̄ does not see this step's ‖u‖, so unlike exact LAMB's
  // ratio it cannot bound it: u is bounded as 1-bit Adam's is (Note [1-bit
  // step bound]).
  Tensor u = bounded_adam_direction(m, c1, denom, o.beta1(), o.beta2());
  Tensor factor = (denom / ((layer.fresh_v / c2_fresh).sqrt() + o.eps())).max();
  if (o.weight_decay() != 0) {
    // r scales the adaptive part of u; the decay's part keeps factor 1.
    const Tensor adaptive = u.norm();
    u.add_(layer.param, o.weight_decay());
    const Tensor whole = u.norm();
    const Tensor share =
        ::torch::where(whole.gt(0), (adaptive / whole).clamp_max(1), ::torch::ones_like(whole));
    factor = factor * share + (1 - share);
  }
  factor = factor.clamp(options_.factor_min, options_.factor_max);
  factor = ::torch::minimum(factor, layer.last_factor * (1 + options_.factor_threshold));
  factor = ::torch::maximum(factor, layer.last_factor * (1 - options_.factor_threshold));
  layer.last_factor = factor;
  Tensor trust = layer.frozen_trust * factor;
  if (o.max_trust_ratio() > 0) trust = trust.clamp_max(o.max_trust_ratio());
  layer.trust = trust;
  layer.param.sub_(u.mul_(trust), o.lr());
}

std::vector<double> OneBitLamb::trust_ratios() const {
  std::vector<double> out;
  for (const auto& layer : layers_) out.push_back(scalar_of(layer.trust));
  return out;
}

std::vector<double> OneBitLamb::frozen_trust_ratios() const {
  std::vector<double> out;
  for (const auto& layer : layers_) out.push_back(scalar_of(layer.frozen_trust));
  return out;
}

}  // namespace lockstep::torch
