// lockstep-gan: a GAN on eight Gaussians around a circle, trained with
// PyTorch's DCGAN loop and one DistributedOptimizer per model:
//
//   D step: d.zero_grad(); errD_real.backward(); errD_fake.backward()  (fake detached)
//           d.step()                           (two passes: backward_passes_per_step = 2)
//   G step: g.zero_grad(); errG.backward()     (through D: it adds into D's .grad)
//           g.step()                           (D's next zero_grad() drops what G left)
//
// Same loop with --overlap on and off (docs/torch.md, Note [Gradients after
// step()] in distributed_optimizer.cc). After broadcast_parameters each rank
// re-seeds with seed + rank, so ranks draw different noise and real samples.
// Prints, on rank 0, the losses and at the end how many of the eight modes the
// generator covers and what fraction of its samples lie near a mode.
//
//   lockstep run -np 2 lockstep-gan --overlap on
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <numbers>

#include "lockstep/base/error.h"
#include "lockstep/torch/torch.h"

namespace lt = lockstep::torch;
namespace nn = torch::nn;
namespace nnf = torch::nn::functional;

namespace {

struct Flags {
  int steps = 1500;
  int64_t batch = 128;  // per rank
  double lr = 1e-3;
  uint64_t seed = 1;
  std::string overlap = "auto";
  int log_every = 250;
};

constexpr int kModes = 8;
constexpr double kRadius = 2.0;
constexpr double kStd = 0.05;
constexpr int64_t kNoise = 8;

torch::Tensor mode_centres() {
  auto angle = torch::arange(kModes, torch::kFloat32) * (2 * std::numbers::pi / kModes);
  return torch::stack({torch::cos(angle), torch::sin(angle)}, 1) * kRadius;
}

torch::Tensor real_batch(int64_t n, const torch::Tensor& centres) {
  auto which = torch::randint(kModes, {n}, torch::kLong);
  return centres.index_select(0, which) + torch::randn({n, 2}) * kStd;
}

nn::Sequential mlp(int64_t in, int64_t out) {
  return nn::Sequential(nn::Linear(in, 128), nn::ReLU(), nn::Linear(128, 128), nn::ReLU(),
                        nn::Linear(128, out));
}

torch::Tensor bce(const torch::Tensor& logits, double label) {
  return nnf::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
}

lt::Overlap parse_overlap(const std::string& s) {
  if (s == "on") return lt::Overlap::kOn;
  if (s == "off") return lt::Overlap::kOff;
  if (s == "auto") return lt::Overlap::kAuto;
  throw lockstep::InvalidArgument(fmt::format("--overlap '{}': use on, off or auto", s));
}

// Modes with at least one sample within 3 std, and the fraction of samples
// that are within 3 std of some mode.
std::pair<int, double> quality(const torch::Tensor& samples, const torch::Tensor& centres) {
  auto distance = torch::cdist(samples, centres);  // [n, modes]
  auto [nearest, which] = distance.min(1);
  auto good = nearest < 3 * kStd;
  const int covered =
      torch::bincount(which.masked_select(good), {}, kModes).gt(0).sum().item<int>();
  return {covered, good.to(torch::kFloat64).mean().item<double>()};
}

int run(const Flags& f) {
  lt::init();
  torch::manual_seed(f.seed);  // initial weights; broadcast below makes them agree anyway
  nn::Sequential g = mlp(kNoise, 2), d = mlp(2, 1);
  const auto adam = torch::optim::AdamOptions(f.lr).betas({0.5, 0.999});
  torch::optim::Adam g_adam(g->parameters(), adam), d_adam(d->parameters(), adam);
  lt::DistributedOptimizerOptions d_options{.backward_passes_per_step = 2};  // real + fake
  d_options.overlap = parse_overlap(f.overlap);
  d_options.name_prefix = "d";
  lt::DistributedOptimizerOptions g_options{.overlap = d_options.overlap};
  g_options.name_prefix = "g";
  lt::DistributedOptimizer d_opt(d_adam, *d, d_options), g_opt(g_adam, *g, g_options);
  lt::broadcast_parameters(*g);
  lt::broadcast_parameters(*d);
  // Weights now agree; data must not: a shared seed would give every rank the
  // same noise and the same real batch, i.e. one rank's batch at any size.
  torch::manual_seed(f.seed + static_cast<uint64_t>(lt::rank()));
  if (lt::rank() == 0)
    fmt::print(stderr, "lockstep-gan: {} rank(s) x batch {}, overlap {}\n", lt::size(), f.batch,
               d_opt.overlaps_backward() ? "on" : "off");
  const torch::Tensor centres = mode_centres();
  for (int step = 1; step <= f.steps; ++step) {
    d_opt.zero_grad();
    auto err_real = bce(d->forward(real_batch(f.batch, centres)), 1.0);
    err_real.backward();
    auto fake = g->forward(torch::randn({f.batch, kNoise}));
    auto err_fake = bce(d->forward(fake.detach()), 0.0);
    err_fake.backward();
    d_opt.step();
    g_opt.zero_grad();
    auto err_g = bce(d->forward(fake), 1.0);
    err_g.backward();
    g_opt.step();
    if (lt::rank() == 0 && (step % f.log_every == 0 || step == f.steps))
      fmt::print(stderr, "step {:5d}  D_loss {:.4f}  G_loss {:.4f}\n", step,
                 (err_real + err_fake).item<double>(), err_g.item<double>());
  }
  torch::NoGradGuard no_grad;
  auto [covered, near] = quality(g->forward(torch::randn({4096, kNoise})), centres);
  if (lt::rank() == 0)
    fmt::print("modes covered {}/{}, samples within 3 std of a mode {:.1f}%\n", covered, kModes,
               100 * near);
  lt::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "A GAN on a 2-D Gaussian mixture with two DistributedOptimizers (run it with: "
      "lockstep run -np 2 lockstep-gan --overlap on)"};
  Flags f;
  app.add_option("--steps", f.steps, "training steps (one D and one G update each)")
      ->capture_default_str();
  app.add_option("--batch-size", f.batch, "samples per rank per step")->capture_default_str();
  app.add_option("--lr", f.lr, "Adam learning rate of both models")->capture_default_str();
  app.add_option("--seed", f.seed, "weights' seed; rank r draws data with seed + r")
      ->capture_default_str();
  app.add_option("--overlap", f.overlap, "on|off|auto (LOCKSTEP_OVERLAP)")->capture_default_str();
  app.add_option("--log-every", f.log_every, "steps between loss lines")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-gan: {}\n", e.what());
    return 1;
  }
}
