#include "fashion_mnist/recipe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lockstep/optim/schedule.h"

#include "lockstep/torch/torch.h"

namespace lockstep::examples {

namespace lt = lockstep::torch;

void apply_recipe(const CLI::App& app, Options& o) {
  if (o.recipe == "default") return;
  const auto unset = [&app](const char* flag) { return app.count(flag) == 0; };
  // Both recipes drop the default's width and augmentation: they buy final
  // accuracy (docs/main-job.md) but cost time per epoch and early epochs.
  if (unset("--channels1")) o.channels1 = 16;
  if (unset("--channels2")) o.channels2 = 32;
  if (unset("--flip")) o.flip = 0;
  if (unset("--tta")) o.tta = "none";
  if (o.recipe == "fast") return;  // keeps pool-first, channels-last and the EMA
  if (unset("--pool-first")) o.pool_first = false;
  if (unset("--channels-last")) o.channels_last = false;
  if (unset("--ema")) o.ema = 0;
}

std::string describe_recipe(const Options& o) {
  std::vector<std::string> parts;
  if (o.pool_first) parts.push_back("pool-first");
  if (o.channels_last) parts.push_back("channels-last");
  if (o.schedule == "one-cycle") parts.push_back("one-cycle");
  if (o.label_smoothing > 0)
    parts.push_back(fmt::format("label smoothing {:g}", o.label_smoothing));
  if (o.flip > 0) parts.push_back(fmt::format("flip {:g}", o.flip));
  if (o.tta != "none") parts.push_back("tta " + o.tta);
  if (o.ema > 0) parts.push_back(fmt::format("ema {:g}", o.ema));
  if (o.lookahead > 0)
    parts.push_back(fmt::format("lookahead {} alpha {:g}", o.lookahead, o.lookahead_alpha));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

FashionCnn make_model(const Options& o, int rank) {
  ::torch::manual_seed(o.seed + static_cast<uint64_t>(rank));
  FashionCnnOptions options{o.channels1, o.channels2, {}, o.pool_first};
  if (o.sync_batch_norm)
    options.make_norm = [](int64_t c) { return ::torch::nn::AnyModule(lt::SyncBatchNorm(c)); };
  FashionCnn model(options);
  model->to(lt::placement().torch_device());  // where lt::init() placed this worker
  if (o.channels_last) to_channels_last(*model);
  return model;
}

void to_channels_last(::torch::nn::Module& model) {
  ::torch::NoGradGuard no_grad;
  for (auto& p : model.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(::torch::MemoryFormat::ChannelsLast));
}

namespace {

double one_cycle_lr(const Options& o, double peak, double total_epochs, int64_t train_size,
                    double t) {
  const auto samples = [train_size](double epochs) {
    return static_cast<int64_t>(std::llround(epochs * static_cast<double>(train_size)));
  };
  const auto schedule =
      optim::one_cycle(peak, std::max<int64_t>(1, samples(total_epochs)),
                       {.pct_start = std::min(1.0, o.warmup_epochs / total_epochs)});
  return schedule->lr_at(samples(t));
}

}  // namespace

double lr_at(const Options& o, double peak, double total_epochs, int64_t train_size, double t) {
  if (o.schedule == "one-cycle") return one_cycle_lr(o, peak, total_epochs, train_size, t);
  if (t < o.warmup_epochs) return o.lr + (peak - o.lr) * std::min(1.0, t / o.warmup_epochs);
  if (o.schedule == "constant" || total_epochs <= o.warmup_epochs) return peak;
  const double progress = (t - o.warmup_epochs) / (total_epochs - o.warmup_epochs);
  return peak * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

::torch::Tensor random_flip(const ::torch::Tensor& x, double p) {
  if (p <= 0) return x;
  auto flip = ::torch::rand({x.size(0), 1, 1, 1}, x.options()) < p;
  return ::torch::where(flip, x.flip({3}), x);
}

::torch::Tensor loss(const Options& o, const ::torch::Tensor& logits, const ::torch::Tensor& y) {
  namespace F = ::torch::nn::functional;
  return F::cross_entropy(logits, y,
                          F::CrossEntropyFuncOptions().label_smoothing(o.label_smoothing));
}

::torch::Tensor eval_logits(const Options& o, FashionCnn& model, const ::torch::Tensor& x) {
  auto in = input(o, x);
  auto logits = model->forward(in);
  if (o.tta == "flip") logits = (logits + model->forward(in.flip({3}))) / 2;
  return logits;
}

::torch::Tensor input(const Options& o, ::torch::Tensor x) {
  return o.channels_last ? x.contiguous(::torch::MemoryFormat::ChannelsLast) : x;
}

}  // namespace lockstep::examples
