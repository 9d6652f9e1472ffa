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

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/fashion_cnn.h"
#include "common/fashion_data.h"
#include "common/progress.h"
#include "fashion_mnist/run_dir_flag.h"
#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/elastic.h"
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
  int64_t commit_every = 10;     // elastic: steps between in-memory commits
  std::string sample_log;        // append "epoch index" per committed sample to FILE.<worker>
  std::string inject_kill;       // "WORKER:STEP": that worker SIGKILLs itself (testing)
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
  app.add_option("--commit-every", f.commit_every,
                 "elastic jobs (lockstep run --min-np): steps between in-memory commits; a lost "
                 "worker costs at most this many steps")->capture_default_str();
  app.add_option("--sample-log", f.sample_log,
                 "append 'epoch index' for every committed sample to FILE.<worker id> (to check "
                 "that no sample is trained twice across a re-formation)")->group("Testing");
  app.add_option("--inject-kill", f.inject_kill,
                 "WORKER:STEP: the elastic worker with that id (w0, w1...) kills itself with "
                 "SIGKILL before that step")->group("Testing");
}

double lr_scale(const std::string& scaling, int workers) {
  if (scaling == "linear") return workers;
  if (scaling == "sqrt") return std::sqrt(static_cast<double>(workers));
  return 1.0;
}

// Warm-up from the base lr to the scaled one (Goyal et al.), then cosine or
// constant. Positions are in epochs (fractional), not steps, so the schedule
// stays the same when an elastic job changes its number of workers.
double lr_at(const Flags& f, double peak, double epochs_done, double total_epochs) {
  if (epochs_done < f.warmup_epochs)
    return f.lr + (peak - f.lr) * std::min(1.0, epochs_done / f.warmup_epochs);
  if (f.schedule == "constant" || total_epochs <= f.warmup_epochs) return peak;
  const double progress = (epochs_done - f.warmup_epochs) / (total_epochs - f.warmup_epochs);
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
                  .seed = f_.seed}),
        state_(*model_, *optimizer_, &sampler_, &distributed_),
        elastic_(lockstep::engine::elastic_enabled()) {
    total_epochs_ = f_.epochs;
    if (f_.max_steps > 0)
      total_epochs_ = std::min<double>(
          f_.epochs, static_cast<double>(f_.max_steps) / sampler_.num_batches(f_.batch_size));
    // The same starting point everywhere, whatever each rank's init was, is
    // the first thing run_elastic() does (ElasticState::sync).
  }

  void maybe_resume() {
    if (!f_.resume || f_.checkpoint_dir.empty()) return;
    lt::TrainingProgress progress;
    if (!lt::load_checkpoint(checkpoint_path(), *model_, *optimizer_, progress)) return;
    sampler_.load(progress.sampler);
    state_.epoch = progress.epoch;
    if (sampler_.state().position >= sampler_.num_samples()) {
      sampler_.set_epoch(progress.epoch + 1);
      state_.epoch = progress.epoch + 1;
    }
    state_.step = progress.step;
    if (lt::rank() == 0)
      fmt::print(stderr, "resumed from {} at epoch {} step {}\n", checkpoint_path(),
                 progress.epoch + 1, state_.step);
  }

  // In an elastic job (lockstep run --min-np) this survives lost and added
  // workers: run_elastic re-forms the world, restores the last commit and
  // calls train() again, which continues from state_.epoch and the sampler.
  void run() {
    start_ = std::chrono::steady_clock::now();
    lt::run_elastic(state_, [this](lt::ElasticState&) { train(); });
  }

 private:
  FashionCnn make_model() {
    torch::manual_seed(f_.seed + static_cast<uint64_t>(lt::rank()));  // broadcast fixes this
    lockstep::examples::FashionCnnOptions options{f_.channels1, f_.channels2, {}};
    if (f_.sync_batch_norm)
      options.make_norm = [](int64_t c) { return torch::nn::AnyModule(lt::SyncBatchNorm(c)); };
    return FashionCnn(options);
  }

  void train() {
    peak_lr_ = f_.lr * lr_scale(f_.lr_scaling, lt::size());  // the world may have changed
    uncommitted_.clear();
    for (int64_t epoch = state_.epoch; epoch < f_.epochs && !done(); ++epoch) {
      if (epoch != sampler_.epoch()) sampler_.set_epoch(epoch);
      state_.epoch = epoch;
      EpochStats stats = train_epoch(epoch);
      const double test_accuracy = evaluate(model_, test_, 1000);
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      report(epoch, stats, test_accuracy, elapsed);
      state_.epoch = epoch + 1;
      commit();
      save(epoch);
    }
  }

  // Elastic jobs only: a snapshot in memory, and the sample log of what it
  // made permanent (batches after the last commit are redone after a loss).
  void commit() {
    if (!elastic_) return;
    if (!f_.sample_log.empty() && !uncommitted_.empty()) {
      std::ofstream log(fmt::format("{}.{}", f_.sample_log, lockstep::engine::worker_id()),
                        std::ios::app);
      for (auto index : uncommitted_) log << sampler_.epoch() << " " << index << "\n";
    }
    uncommitted_.clear();
    state_.commit();
  }

  void maybe_inject_kill() const {
    if (f_.inject_kill.empty() || !elastic_) return;
    if (f_.inject_kill == fmt::format("{}:{}", lockstep::engine::worker_id(), state_.step))
      ::raise(SIGKILL);
  }

  double epochs_done() const {
    return static_cast<double>(sampler_.epoch()) +
           static_cast<double>(sampler_.global_position()) / static_cast<double>(train_.size());
  }

  bool done() const { return f_.max_steps > 0 && state_.step >= f_.max_steps; }
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
      maybe_inject_kill();
      set_lr(*optimizer_, lr_at(f_, peak_lr_, epochs_done(), total_epochs_));
      auto batch = sampler_.next_batch(f_.batch_size);
      if (batch.empty()) break;
      auto index = torch::tensor(batch, torch::kInt64);
      auto x = train_.images.index_select(0, index);
      auto y = train_.labels.index_select(0, index);
      distributed_.zero_grad();
      auto logits = model_->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      distributed_.step();
      ++state_.step;
      ++done_steps;
      if (!f_.sample_log.empty()) uncommitted_.insert(uncommitted_.end(), batch.begin(), batch.end());
      if (f_.commit_every > 0 && state_.step % f_.commit_every == 0) commit();
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
    nlohmann::json line = {{"epoch", epoch + 1}, {"step", state_.step},
                           {"train_loss", s.loss}, {"train_accuracy", s.accuracy},
                           {"test_accuracy", test_accuracy}, {"samples_per_s", s.samples_per_s},
                           {"epoch_seconds", s.seconds}, {"elapsed_s", elapsed},
                           {"workers", lt::size()}, {"batch_size", f_.batch_size},
                           {"lr", peak_lr_}, {"reformations", state_.reformations()}};
    std::ofstream(f_.metrics, std::ios::app) << line.dump() << "\n";
  }

  void save(int64_t epoch) {
    if (f_.checkpoint_dir.empty()) return;
    std::filesystem::create_directories(f_.checkpoint_dir);
    lt::save_checkpoint(checkpoint_path(), *model_, *optimizer_,
                        {.epoch = epoch, .step = state_.step, .sampler = sampler_.save(),
                         .user = {}});
  }

  const Flags& f_;
  FashionSplit train_, test_;
  FashionCnn model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  lt::DistributedOptimizer distributed_;
  lt::DistributedSampler sampler_;
  lt::ElasticState state_;
  const bool elastic_;
  double total_epochs_ = 0, peak_lr_ = 0;
  std::vector<int64_t> uncommitted_;
  std::chrono::steady_clock::time_point start_;
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
  std::string run_dir;
  lockstep::examples::add_run_dir_flag(app, run_dir);
  CLI11_PARSE(app, argc, argv);
  try {
    lockstep::examples::apply_run_dir(run_dir, flags.metrics, flags.timeline, argc, argv);
    return run(flags);
  } catch (const lockstep::engine::RemovedFromWorld& e) {
    fmt::print(stderr, "lockstep-fashion-mnist: leaving the job: {}\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-fashion-mnist: error: {}\n", e.what());
    return 1;
  }
}
