#include "fashion_mnist/telemetry.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/run_dir.h"
#include "fashion_mnist/recipe.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/metrics.h"

namespace lockstep::examples {
namespace lt = lockstep::torch;
namespace {

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string args((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : args)
    if (c == '\0') c = ' ';
  while (!args.empty() && args.back() == ' ') args.pop_back();
  return args;
}

// The run's configuration for TensorBoard's Text tab (markdown): the command
// line and the values the recipe resolved to.
std::string config_text(const Options& o) {
  std::ostringstream s;
  s << "    " << command_line() << "\n\n| setting | value |\n|---|---|\n";
  auto row = [&](const char* name, const auto& value) {
    s << "| " << name << " | " << value << " |\n";
  };
  row("workers", lt::size());
  row("batch per worker", o.batch_size);
  row("epochs", o.epochs);
  row("recipe", o.recipe + (o.recipe == "default" ? "" : ": " + describe_recipe(o)));
  row("optimizer", o.optimizer);
  row("lr (one worker)", o.lr);
  row("lr scaling", o.lr_scaling);
  row("schedule", fmt::format("{}, {} warm-up epochs", o.schedule, o.warmup_epochs));
  row("precision", o.precision);
  row("compression", fmt::format("{} ({} warm-up steps)", o.compression, o.compression_warmup));
  row("seed", o.seed);
  row("train / test subset", fmt::format("{} / {} (0: all)", o.train_subset, o.test_subset));
  row("target accuracy", o.target_accuracy);
  row("log every", fmt::format("{} steps{}", o.log_every, o.log_ranks ? ", per rank" : ""));
  return s.str();
}

}  // namespace

double gradient_norm(const ::torch::nn::Module& model) {
  double squares = 0;
  for (const auto& p : model.parameters())
    if (p.grad().defined()) squares += p.grad().to(::torch::kFloat64).pow(2).sum().item<double>();
  return std::sqrt(squares);
}

void add_telemetry_options(CLI::App& app, Options& o) {
  const char* g = "Telemetry";
  app.add_option("--tensorboard", o.tensorboard,
                 "write TensorBoard event files into DIR (--run-dir DIR: there)")
      ->group(g);
  app.add_option("--log-every", o.log_every,
                 "every N optimizer steps, a per-step row in --metrics and TensorBoard scalars "
                 "(0: per epoch only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(g);
  app.add_flag("--log-ranks", o.log_ranks,
               "also every rank's step time, communication wait and loss (rank_K/ tags; one "
               "small allreduce per logged step)")
      ->group(g);
}

Telemetry::Telemetry(const Options& o) : o_(o), every_(o.log_every) {
  if (auto* e = events()) e->write(0, summary::Summary().text("config", config_text(o_)));
}

summary::EventWriter* Telemetry::events() {
  if (o_.tensorboard.empty() || lt::rank() != 0) return nullptr;
  if (!events_) events_.emplace(o_.tensorboard);
  return &*events_;
}

void Telemetry::after_step(const StepSample& s, const std::function<double()>& grad_norm) {
  loss_sum_ += s.loss * static_cast<double>(s.samples);
  samples_ += s.samples;
  step_s_ += s.step_s;
  wait_s_ += s.wait_s;
  ++steps_;
  if (!due(s.step) || (o_.metrics.empty() && o_.tensorboard.empty())) return;
  const double step_ms = 1e3 * step_s_ / static_cast<double>(steps_);
  const double wait_share = step_s_ > 0 ? wait_s_ / step_s_ : 0;
  const double loss = samples_ > 0 ? loss_sum_ / static_cast<double>(samples_) : 0;
  // Collective: every rank takes part, whoever writes.
  const nlohmann::json ranks = o_.log_ranks ? gather_ranks(step_ms, wait_share, loss) : nullptr;
  if (lt::rank() == 0) write_row(s, grad_norm(), ranks);
  loss_sum_ = step_s_ = wait_s_ = 0;
  samples_ = steps_ = 0;
}

// Each rank fills its own slots of a zero vector; the sum is every rank's values.
nlohmann::json Telemetry::gather_ranks(double step_ms, double wait_share, double loss) const {
  const int n = lt::size(), me = lt::rank();
  std::vector<double> mine(static_cast<size_t>(3 * n), 0.0);
  mine[static_cast<size_t>(3 * me)] = step_ms;
  mine[static_cast<size_t>(3 * me + 1)] = wait_share;
  mine[static_cast<size_t>(3 * me + 2)] = loss;
  const auto all = lt::sum_across_ranks(mine, "telemetry.ranks");
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < static_cast<size_t>(n); ++r)
    ranks.push_back({{"rank", r},
                     {"step_ms", all[3 * r]},
                     {"comm_wait_share", all[3 * r + 1]},
                     {"loss", all[3 * r + 2]}});
  return ranks;
}

void Telemetry::write_row(const StepSample& s, double grad_norm, const nlohmann::json& ranks) {
  const double step_ms = 1e3 * step_s_ / static_cast<double>(steps_);
  const double samples_per_s =
      step_s_ > 0 ? static_cast<double>(samples_) * lt::size() / step_s_ : 0;
  nlohmann::json row = {{"kind", "step"},
                        {"step", s.step},
                        {"epochs_done", s.epochs_done},
                        {"loss", loss_sum_ / static_cast<double>(samples_)},
                        {"lr", s.lr},
                        {"samples_per_s", samples_per_s},
                        {"step_ms", step_ms},
                        {"comm_wait_share", step_s_ > 0 ? wait_s_ / step_s_ : 0},
                        {"grad_norm", grad_norm},
                        {"workers", lt::size()}};
  if (!ranks.is_null()) row["ranks"] = ranks;
  if (!o_.metrics.empty()) RunDir::append_line(o_.metrics, row);
  auto* e = events();
  if (!e) return;
  summary::Summary sum;
  for (const char* k : {"loss", "lr", "samples_per_s", "step_ms", "comm_wait_share", "grad_norm"})
    sum.scalar(fmt::format("train/{}", k), row[k].get<double>());
  sum.scalar("train/epochs_done", s.epochs_done);
  for (const auto& r : ranks.is_null() ? nlohmann::json::array() : ranks)
    for (const char* k : {"step_ms", "comm_wait_share", "loss"})
      sum.scalar(fmt::format("rank_{}/{}", r["rank"].get<int>(), k), r[k].get<double>());
  e->write(s.step, sum);
}

void Telemetry::evaluated(int64_t step, double epochs_done, double accuracy) {
  if (auto* e = events())
    e->write(step, summary::Summary()
                       .scalar("test/accuracy", accuracy)
                       .scalar("test/epochs_done", epochs_done));
}

void Telemetry::epoch_ended(int64_t step, const nlohmann::json& line) {
  auto* e = events();
  if (!e) return;
  summary::Summary sum;
  for (const char* k : {"train_loss", "train_accuracy", "samples_per_s", "epoch_seconds", "lr"})
    if (line.contains(k) && line[k].is_number())
      sum.scalar(fmt::format("epoch/{}", k), line[k].get<double>());
  sum.scalar("epoch/epoch", line.value("epoch", 0));
  e->write(step, sum);
}

}  // namespace lockstep::examples
