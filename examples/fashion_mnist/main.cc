// lockstep-fashion-mnist: the README's main job. Data-parallel training of
// FashionCnn on Fashion-MNIST, one process per worker:
//
//   lockstep run -np 2 lockstep-fashion-mnist
//
// Also runs as a plain single process. docs/main-job.md describes the flags,
// the default recipe and the numbers it reaches.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/fashion_cnn.h"
#include "common/fashion_data.h"
#include "common/progress.h"
#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/torch.h"

namespace lt = lockstep::torch;
using lockstep::examples::FashionCnn;
using lockstep::examples::FashionSplit;

namespace {

struct Flags {
  int epochs = 4;
  int64_t batch_size = 64;  // per worker
  double lr = 2e-3;         // base: one worker's
  std::string lr_scaling = "sqrt";
  double warmup_epochs = 0;
  std::string schedule = "cosine";
  std::string optimizer = "adam";
  uint64_t seed = 42;
  std::string checkpoint_dir;
  bool resume = false;
  std::string timeline;
  std::string data = lockstep::data::kFashionMnistDir;
  int64_t train_subset = 0;
  int64_t test_subset = 0;
  int64_t max_steps = 0;
  std::string metrics;
  bool sync_batch_norm = false;
  int64_t channels1 = 16, channels2 = 32;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "samples per worker per step")->capture_default_str();
  app.add_option("--lr", f.lr, "base learning rate (one worker's)")->capture_default_str();
  app.add_option("--lr-scaling", f.lr_scaling, "lr multiplier by workers: none|linear|sqrt")
      ->check(CLI::IsMember({"none", "linear", "sqrt"}))->capture_default_str();
  app.add_option("--warmup-epochs", f.warmup_epochs, "ramp from the base to the scaled lr")
      ->capture_default_str();
  app.add_option("--schedule", f.schedule, "after warm-up: cosine|constant")
      ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "sgd|adam")
      ->check(CLI::IsMember({"sgd", "adam"}))->capture_default_str();
  app.add_option("--seed", f.seed, "model init and shuffling")->capture_default_str();
  app.add_option("--checkpoint-dir", f.checkpoint_dir, "write checkpoint.pt there each epoch");
  app.add_flag("--resume", f.resume, "continue from --checkpoint-dir/checkpoint.pt if present");
  app.add_option("--timeline", f.timeline, "write a Chrome-trace timeline of the collectives");
  app.add_option("--data", f.data,
                 "folder with the Fashion-MNIST IDX files, or with record shards written by "
                 "`lockstep convert idx --split train|t10k --out DIR`")->capture_default_str();
  app.add_option("--train-subset", f.train_subset, "use the first N training samples (0: all)");
  app.add_option("--test-subset", f.test_subset, "use the first N test samples (0: all)");
  app.add_option("--max-steps", f.max_steps, "stop after this many optimizer steps (0: none)");
  app.add_option("--metrics", f.metrics, "append one JSON line per epoch to FILE");
  app.add_flag("--sync-batch-norm", f.sync_batch_norm, "batch statistics over all workers");
  app.add_option("--channels1", f.channels1, "width of the first conv")->capture_default_str();
  app.add_option("--channels2", f.channels2, "width of the second conv")->capture_default_str();
}

double lr_scale(const std::string& scaling, int workers) {
  if (scaling == "linear") return workers;
  if (scaling == "sqrt") return std::sqrt(static_cast<double>(workers));
  return 1.0;
}

// Warm-up from the base lr to the scaled one (Goyal et al.), then cosine or constant.
double lr_at(const Flags& f, double peak, int64_t step, int64_t warmup_steps, int64_t total) {
  if (step < warmup_steps)
    return f.lr + (peak - f.lr) * static_cast<double>(step + 1) / warmup_steps;
  if (f.schedule == "constant" || total <= warmup_steps) return peak;
  const double progress = static_cast<double>(step - warmup_steps) / (total - warmup_steps);
  return peak * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& f, FashionCnn& model) {
  if (f.optimizer == "sgd")
    return std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(f.lr).momentum(0.9).nesterov(true));
  return std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(f.lr));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Each rank evaluates a contiguous slice of the test set; the accuracy is
// exact: total correct / total samples over all ranks.
double evaluate(FashionCnn& model, const FashionSplit& test, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = test.size(), r = lt::rank(), s = lt::size();
  const int64_t begin = n * r / s, end = n * (r + 1) / s;
  lt::Tally accuracy;
  for (int64_t i = begin; i < end; i += batch_size) {
    const int64_t len = std::min(batch_size, end - i);
    auto logits = model->forward(test.images.narrow(0, i, len));
    auto correct = logits.argmax(1).eq(test.labels.narrow(0, i, len)).sum().item<double>();
    accuracy.add(correct, static_cast<double>(len));
  }
  model->train();
  return accuracy.global_value("eval.accuracy");
}

struct EpochStats {
  double loss = 0, accuracy = 0, samples_per_s = 0, seconds = 0;
  int64_t steps = 0;
};

class Trainer {
 public:
  Trainer(const Flags& flags, FashionSplit train, FashionSplit test)
      : f_(flags), train_(std::move(train)), test_(std::move(test)),
        model_(make_model()), optimizer_(make_optimizer(f_, model_)),
        distributed_(*optimizer_, *model_),
        sampler_({.dataset_size = train_.size(), .rank = lt::rank(), .size = lt::size(),
                  .seed = f_.seed}) {
    steps_per_epoch_ = sampler_.num_batches(f_.batch_size);
    total_steps_ = steps_per_epoch_ * f_.epochs;
    if (f_.max_steps > 0) total_steps_ = std::min(total_steps_, f_.max_steps);
    warmup_steps_ = static_cast<int64_t>(f_.warmup_epochs * steps_per_epoch_);
    peak_lr_ = f_.lr * lr_scale(f_.lr_scaling, lt::size());
    // Same starting point everywhere, whatever each rank's init was.
    lt::broadcast_parameters(*model_, 0);
    lt::broadcast_optimizer_state(*optimizer_, 0);
  }

  void maybe_resume() {
    if (!f_.resume || f_.checkpoint_dir.empty()) return;
    lt::TrainingProgress progress;
    if (!lt::load_checkpoint(checkpoint_path(), *model_, *optimizer_, progress)) return;
    sampler_.load(progress.sampler);
    if (sampler_.state().position >= sampler_.num_samples()) sampler_.set_epoch(progress.epoch + 1);
    step_ = progress.step;
    if (lt::rank() == 0)
      fmt::print(stderr, "resumed from {} at epoch {} step {}\n", checkpoint_path(),
                 progress.epoch + 1, step_);
  }

  void run() {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t epoch = sampler_.epoch(); epoch < f_.epochs && !done(); ++epoch) {
      if (epoch != sampler_.epoch()) sampler_.set_epoch(epoch);
      EpochStats stats = train_epoch(epoch);
      const double test_accuracy = evaluate(model_, test_, 1000);
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      report(epoch, stats, test_accuracy, elapsed);
      save(epoch);
    }
  }

 private:
  FashionCnn make_model() {
    torch::manual_seed(f_.seed + static_cast<uint64_t>(lt::rank()));  // broadcast fixes this
    lockstep::examples::FashionCnnOptions options{f_.channels1, f_.channels2, {}};
    if (f_.sync_batch_norm)
      options.make_norm = [](int64_t c) { return torch::nn::AnyModule(lt::SyncBatchNorm(c)); };
    return FashionCnn(options);
  }

  bool done() const { return f_.max_steps > 0 && step_ >= f_.max_steps; }
  std::string checkpoint_path() const { return f_.checkpoint_dir + "/checkpoint.pt"; }

  EpochStats train_epoch(int64_t epoch) {
    const int64_t epoch_steps = sampler_.num_batches(f_.batch_size);
    lockstep::examples::ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, f_.epochs),
                                        epoch_steps, lt::rank() == 0);
    EpochStats stats;
    double loss_sum = 0, correct = 0, seen = 0;
    const auto start = std::chrono::steady_clock::now();
    int64_t done_steps = sampler_.state().position / f_.batch_size;
    while (!done()) {
      auto batch = sampler_.next_batch(f_.batch_size);
      if (batch.empty()) break;
      auto index = torch::tensor(batch, torch::kInt64);
      auto x = train_.images.index_select(0, index);
      auto y = train_.labels.index_select(0, index);
      set_lr(*optimizer_, lr_at(f_, peak_lr_, step_, warmup_steps_, total_steps_));
      distributed_.zero_grad();
      auto logits = model_->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      distributed_.step();
      ++step_;
      ++done_steps;
      const auto n = static_cast<double>(batch.size());
      loss_sum += loss.item<double>() * n;
      correct += logits.argmax(1).eq(y).sum().item<double>();
      seen += n;
      bar.update(done_steps, loss_sum / seen, correct / seen, seen * lt::size());
      ++stats.steps;
    }
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats.loss = seen > 0 ? loss_sum / seen : 0;
    stats.accuracy = seen > 0 ? correct / seen : 0;
    stats.samples_per_s = stats.seconds > 0 ? seen * lt::size() / stats.seconds : 0;
    return stats;
  }

  void report(int64_t epoch, const EpochStats& s, double test_accuracy, double elapsed) {
    if (lt::rank() != 0) return;
    fmt::print(stderr,
               "epoch {}/{}: train loss {:.4f} acc {:.2f}% | test acc {:.2f}% | {:.0f} samples/s "
               "| {:.1f} s\n",
               epoch + 1, f_.epochs, s.loss, 100 * s.accuracy, 100 * test_accuracy,
               s.samples_per_s, elapsed);
    if (f_.metrics.empty()) return;
    nlohmann::json line = {{"epoch", epoch + 1}, {"step", step_},
                           {"train_loss", s.loss}, {"train_accuracy", s.accuracy},
                           {"test_accuracy", test_accuracy}, {"samples_per_s", s.samples_per_s},
                           {"epoch_seconds", s.seconds}, {"elapsed_s", elapsed},
                           {"workers", lt::size()}, {"batch_size", f_.batch_size},
                           {"lr", peak_lr_}};
    std::ofstream(f_.metrics, std::ios::app) << line.dump() << "\n";
  }

  void save(int64_t epoch) {
    if (f_.checkpoint_dir.empty()) return;
    std::filesystem::create_directories(f_.checkpoint_dir);
    lt::save_checkpoint(checkpoint_path(), *model_, *optimizer_,
                        {.epoch = epoch, .step = step_, .sampler = sampler_.save(), .user = {}});
  }

  const Flags& f_;
  FashionSplit train_, test_;
  FashionCnn model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  lt::DistributedOptimizer distributed_;
  lt::DistributedSampler sampler_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, warmup_steps_ = 0, step_ = 0;
  double peak_lr_ = 0;
};

int run(const Flags& flags) {
  lt::init();
  if (!flags.timeline.empty()) lockstep::engine::global().start_timeline(flags.timeline);
  FashionSplit train = lockstep::examples::load_fashion_split(flags.data, "train", flags.train_subset);
  FashionSplit test = lockstep::examples::load_fashion_split(flags.data, "t10k", flags.test_subset);
  if (lt::rank() == 0)
    fmt::print(stderr, "lockstep-fashion-mnist: {} worker(s) x batch {}, {} training samples, "
               "{} intra-op thread(s) each\n", lt::size(), flags.batch_size, train.size(),
               torch::get_num_threads());
  Trainer trainer(flags, std::move(train), std::move(test));
  trainer.maybe_resume();
  trainer.run();
  if (!flags.timeline.empty()) lockstep::engine::global().stop_timeline();
  lt::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel Fashion-MNIST training (run it with: lockstep run -np 2 "
               "lockstep-fashion-mnist)"};
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-fashion-mnist: error: {}\n", e.what());
    return 1;
  }
}
