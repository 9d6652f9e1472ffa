#include "fashion_mnist/trainer.h"

#include <fmt/format.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "common/progress.h"
#include "fashion_mnist/evaluate.h"
#include "lockstep/torch/state_dict.h"
#include "fashion_mnist/recipe.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/same_bits.h"

namespace lockstep::examples {
namespace lt = lockstep::torch;
namespace {

double lr_scale(const std::string& scaling, int workers) {
  if (scaling == "linear") return workers;
  if (scaling == "sqrt") return std::sqrt(static_cast<double>(workers));
  return 1.0;
}

void set_lr(::torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(const Options& o, FashionCnn& model) {
  if (o.optimizer == "sgd")
    return std::make_unique<::torch::optim::SGD>(
        model->parameters(), ::torch::optim::SGDOptions(o.lr).momentum(0.9).nesterov(true));
  if (o.optimizer == "lamb")  // lockstep's LAMB (docs/optim.md), for --compression onebit-lamb
    return std::make_unique<lockstep::optim::Lamb>(model->parameters(),
                                                   lockstep::optim::LambOptions(o.lr));
  return std::make_unique<::torch::optim::Adam>(model->parameters(),
                                                ::torch::optim::AdamOptions(o.lr));
}

Trainer::Trainer(const Options& options, FashionSplit train, FashionSplit test)
    : o_(options),
      train_(std::move(train)),
      test_(std::move(test)),
      model_(make_model(o_, lt::rank())),
      optimizer_(make_optimizer(o_, model_)),
      precision_(o_.precision, o_.compression, o_.compression_warmup),
      distributed_(*optimizer_, *model_, precision_.optimizer_options()),
      sampler_(
          {.dataset_size = train_.size(), .rank = lt::rank(), .size = lt::size(), .seed = o_.seed}),
      state_(*model_, *optimizer_, &sampler_, &distributed_),
      elastic_(lockstep::engine::elastic_enabled()),
      evals_(o_.eval_interval(), o_.target_accuracy),
      telemetry_(o_) {
  // Lookahead's slow weights are not part of the elastic commit, so a worker
  // that joins or a rollback would leave ranks with different ones.
  if (elastic_ && o_.lookahead > 0)
    throw InvalidArgument(
        "--lookahead is not supported in elastic jobs (lockstep run --min-np); "
        "use --ema, which only affects evaluation");
  total_epochs_ = o_.epochs;
  if (o_.max_steps > 0)
    total_epochs_ = std::min<double>(
        o_.epochs, static_cast<double>(o_.max_steps) / sampler_.num_batches(o_.batch_size));
  // The same starting point everywhere, whatever each rank's init was, is
  // the first thing run_elastic() does (ElasticState::sync).
}

void Trainer::maybe_init_from() {
  if (o_.init_from.empty()) return;
  lt::load_state_dict(o_.init_from, *model_);
  if (lt::rank() == 0) fmt::print(stderr, "initial weights from {}\n", o_.init_from);
}

// Rank 0 writes what the last evaluation saw: the --ema average when given.
void Trainer::export_weights() {
  if (o_.export_path.empty() || lt::rank() != 0) return;
  std::optional<optim::WeightEma::Applied> averaged;
  if (ema_) averaged.emplace(ema_->apply_to(*model_));
  lt::save_state_dict(o_.export_path, *model_);
  fmt::print(stderr, "exported the weights to {}\n", o_.export_path);
}

void Trainer::maybe_resume() {
  if (!o_.resume || o_.checkpoint_dir.empty()) return;
  lt::TrainingProgress progress;
  if (!checkpoints_.load(*model_, *optimizer_, progress)) return;
  sampler_.load(progress.sampler);
  state_.epoch = progress.epoch;
  if (sampler_.state().position >= sampler_.num_samples()) {
    sampler_.set_epoch(progress.epoch + 1);
    state_.epoch = progress.epoch + 1;
  }
  state_.step = progress.step;
  load_averages(progress.step);
  if (lt::rank() == 0)
    fmt::print(stderr, "resumed from {} at epoch {} step {}\n", checkpoints_.where(),
               progress.epoch + 1, state_.step);
}

void Trainer::run() {
  lt::run_elastic(state_, [this](lt::ElasticState&) { train(); });
  checkpoints_.wait();  // an async save's error ends the job here, not in a destructor's log
  export_weights();
  if (evals_.has_target() && lt::rank() == 0)
    fmt::print("{}\n", evals_.summary(static_cast<int>(state_.epoch)));
}

void Trainer::print_state_hash() const {
  if (lt::rank() != 0) return;
  try {
    fmt::print("state hash: {}\n", lt::state_hash_hex(*model_, *optimizer_));
    std::fflush(stdout);
  } catch (const InvalidArgument& e) {  // LAMB: a state type the hash does not know
    fmt::print(stderr, "lockstep-fashion-mnist: no state hash: {}\n", e.what());
  }
}

void Trainer::train() {
  peak_lr_ = o_.lr * lr_scale(o_.lr_scaling, lt::size());  // the world may have changed
  start_averages();
  uncommitted_.clear();
  for (int64_t epoch = state_.epoch; epoch < o_.epochs && !done(); ++epoch) {
    if (epoch != sampler_.epoch()) sampler_.set_epoch(epoch);
    state_.epoch = epoch;
    EpochStats stats = train_epoch(epoch);
    // The evaluation that reached the target mid-epoch ends it.
    if (!reached_) evaluate_now(/*mid_epoch=*/false);
    report_epoch(epoch, stats, last_accuracy_);
    state_.epoch = epoch + 1;
    commit();
    save(epoch);
  }
  report_target_line();
}

EpochStats Trainer::train_epoch(int64_t epoch) {
  const int64_t epoch_steps = sampler_.num_batches(o_.batch_size);
  ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, o_.epochs), epoch_steps, lt::rank() == 0);
  EpochStats stats;
  double loss_sum = 0, correct = 0, seen = 0;
  const auto start = Clock::now();
  int64_t done_steps = sampler_.state().position / o_.batch_size;
  clock_.resume();
  while (!done()) {
    maybe_inject_kill();
    checkpoints_.poll();  // a failed async write is raised at the next step
    set_lr(*optimizer_, lr_now());
    auto batch = sampler_.next_batch(o_.batch_size);
    if (batch.empty()) break;
    step(batch, loss_sum, correct);
    ++done_steps;
    seen += static_cast<double>(batch.size());
    bar.update(done_steps, loss_sum / seen, correct / seen, seen * lt::size());
    ++stats.steps;
    // Mid-epoch evaluations; the one at the epoch's end is the caller's.
    if (sampler_.state().position < sampler_.num_samples() && evals_.due(epochs_done()) &&
        evaluate_now(/*mid_epoch=*/true))
      break;
  }
  clock_.pause();
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.loss = seen > 0 ? loss_sum / seen : 0;
  stats.accuracy = seen > 0 ? correct / seen : 0;
  stats.samples_per_s = stats.seconds > 0 ? seen * lt::size() / stats.seconds : 0;
  return stats;
}

// Averaged weights start after run_elastic's sync, so every rank starts them
// from the same (broadcast) weights. A resumed job then loads saved ones.
void Trainer::start_averages() {
  if (o_.ema > 0 && !ema_) ema_.emplace(*model_, optim::WeightEmaOptions{.decay = o_.ema});
  if (o_.lookahead > 0 && !lookahead_)
    lookahead_.emplace(model_->parameters(),
                       optim::LookaheadOptions{.k = o_.lookahead, .alpha = o_.lookahead_alpha});
}

void Trainer::step(const std::vector<int64_t>& batch, double& loss_sum, double& correct) {
  const auto start = Clock::now();
  auto index = ::torch::tensor(batch, ::torch::kInt64).to(train_.images.device());
  auto x = random_flip(input(o_, train_.images.index_select(0, index)), o_.flip);
  auto y = train_.labels.index_select(0, index);
  distributed_.zero_grad();
  ::torch::Tensor logits;
  {
    lt::AutocastGuard autocast(precision_.precision());
    logits = model_->forward(x).to(::torch::kFloat32);  // the loss in fp32
  }
  auto loss = examples::loss(o_, logits, y);
  precision_.scaler().scale(loss).backward();
  const auto sync = Clock::now();  // the wait for gradients still in flight starts here
  precision_.scaler().step(distributed_);
  const auto synced = Clock::now();
  if (lookahead_) lookahead_->after_step();
  if (ema_) ema_->update(*model_);
  ++state_.step;
  if (!o_.sample_log.empty()) uncommitted_.insert(uncommitted_.end(), batch.begin(), batch.end());
  if (o_.commit_every > 0 && state_.step % o_.commit_every == 0) commit();
  const auto n = static_cast<double>(batch.size());
  const double batch_loss = loss.item<double>();
  loss_sum += batch_loss * n;
  correct += logits.argmax(1).eq(y).sum().item<double>();
  using seconds = std::chrono::duration<double>;
  telemetry_.after_step({.step = state_.step,
                         .epochs_done = epochs_done(),
                         .loss = batch_loss,
                         .samples = static_cast<int64_t>(batch.size()),
                         .lr = optimizer_->param_groups()[0].options().get_lr(),
                         .step_s = seconds(Clock::now() - start).count(),
                         .wait_s = seconds(synced - sync).count()},
                        [this] { return gradient_norm(*model_); });
}

bool Trainer::evaluate_now(bool mid_epoch) {
  clock_.pause();
  const double epochs = epochs_done();
  {
    std::optional<optim::WeightEma::Applied> averaged;
    if (ema_) averaged.emplace(ema_->apply_to(*model_));
    last_accuracy_ = evaluate(
        *model_, [this](const ::torch::Tensor& x) { return eval_logits(o_, model_, x); }, test_);
  }
  const bool reached = evals_.record(epochs, last_accuracy_, clock_);
  telemetry_.evaluated(state_.step, epochs, last_accuracy_);
  if (lt::rank() == 0 && mid_epoch)
    fmt::print(stderr, "  {:.2f} epochs: test acc {:.2f}% | {:.1f} s training\n", epochs,
               100 * last_accuracy_, clock_.seconds());
  reached_ = reached_ || reached;
  clock_.resume();
  return reached;
}

void Trainer::report_epoch(int64_t epoch, const EpochStats& s, double test_accuracy) {
  if (lt::rank() != 0) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - process_start()).count();
  fmt::print(stderr,
             "epoch {}/{}: train loss {:.4f} acc {:.2f}% | test acc {:.2f}% | {:.0f} samples/s "
             "| {:.1f} s\n",
             epoch + 1, o_.epochs, s.loss, 100 * s.accuracy, 100 * test_accuracy, s.samples_per_s,
             elapsed);
  nlohmann::json line = {{"epoch", epoch + 1},
                         {"step", state_.step},
                         {"epochs_done", epochs_done()},
                         {"train_loss", s.loss},
                         {"train_accuracy", s.accuracy},
                         {"test_accuracy", test_accuracy},
                         {"samples_per_s", s.samples_per_s},
                         {"epoch_seconds", s.seconds},
                         {"train_s", clock_.seconds()},
                         {"elapsed_s", elapsed},
                         {"workers", lt::size()},
                         {"batch_size", o_.batch_size},
                         {"lr", peak_lr_},
                         {"reformations", state_.reformations()},
                         {"precision", o_.precision},
                         {"compression", o_.compression},
                         {"skipped_steps", precision_.scaler().skipped_steps()}};
  telemetry_.epoch_ended(state_.step, line);
  if (o_.metrics.empty()) return;
  std::ofstream(o_.metrics, std::ios::app) << line.dump() << "\n";
}

// With a target, one more line ends the metrics file: when it was reached
// (null fields when it was not). It repeats the last epoch line's "epoch"
// and "test_accuracy", so readers that follow epochs (lockstep sweep) see a
// repeated epoch rather than a line without them.
void Trainer::report_target_line() {
  if (lt::rank() != 0 || o_.metrics.empty() || !evals_.has_target()) return;
  const auto& r = evals_.result();
  nlohmann::json line = {{"epoch", state_.epoch},
                         {"test_accuracy", last_accuracy_},
                         {"target_accuracy", evals_.target()},
                         {"target_reached", r.has_value()},
                         {"time_to_target_s", r ? nlohmann::json(r->training_s) : nullptr},
                         {"wall_to_target_s", r ? nlohmann::json(r->wall_s) : nullptr},
                         {"epochs_to_target", r ? nlohmann::json(r->epochs) : nullptr},
                         {"best_test_accuracy", evals_.best_accuracy()},
                         {"workers", lt::size()},
                         {"seed", o_.seed}};
  std::ofstream(o_.metrics, std::ios::app) << line.dump() << "\n";
}

// Elastic jobs only: a snapshot in memory, and the sample log of what it
// made permanent (batches after the last commit are redone after a loss).
void Trainer::commit() {
  if (!elastic_) return;
  if (!o_.sample_log.empty() && !uncommitted_.empty()) {
    std::ofstream log(fmt::format("{}.{}", o_.sample_log, lockstep::engine::worker_id()),
                      std::ios::app);
    for (auto index : uncommitted_) log << sampler_.epoch() << " " << index << "\n";
  }
  uncommitted_.clear();
  state_.commit();
}

void Trainer::save(int64_t epoch) {
  if (o_.checkpoint_dir.empty()) return;
  // The averages' snapshot: serialized in the pause, written with the
  // step's checkpoint (in the background in async).
  auto averages = [this]() -> std::string {
    if (!ema_ && !lookahead_) return {};
    ::torch::serialize::OutputArchive archive;
    if (ema_) ema_->save(archive);
    if (lookahead_) lookahead_->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    return bytes.str();
  };
  checkpoints_.save(*model_, *optimizer_,
                    {.epoch = epoch, .step = state_.step, .sampler = sampler_.save(), .user = {}},
                    averages);
}

// The averaged weights saved with the checkpoint of `step` (rank 0 wrote
// them; every rank reads the same file, as with the checkpoint). None: the
// averages start afresh from the resumed weights, said on stderr.
void Trainer::load_averages(int64_t step) {
  if (o_.ema <= 0 && o_.lookahead <= 0) return;
  start_averages();
  const auto bytes = checkpoints_.load_averages(step);
  if (!bytes) {
    if (lt::rank() == 0)
      fmt::print(stderr,
                 "no averaged weights saved with step {} in {}: --ema/--lookahead start "
                 "afresh from the resumed weights\n",
                 step, o_.checkpoint_dir);
    return;
  }
  ::torch::serialize::InputArchive archive;
  lt::archive_from_bytes(archive, *bytes);
  if (ema_) ema_->load(archive);
  if (lookahead_) lookahead_->load(archive);
}

void Trainer::maybe_inject_kill() const {
  if (o_.inject_kill.empty() || !elastic_) return;
  if (o_.inject_kill == fmt::format("{}:{}", lockstep::engine::worker_id(), state_.step))
    ::raise(SIGKILL);
}

double Trainer::lr_now() const {
  return lr_at(o_, peak_lr_, total_epochs_, train_.size(), epochs_done());
}

double Trainer::epochs_done() const {
  return static_cast<double>(sampler_.epoch()) +
         static_cast<double>(sampler_.global_position()) / static_cast<double>(train_.size());
}

bool Trainer::done() const { return reached_ || (o_.max_steps > 0 && state_.step >= o_.max_steps); }

}  // namespace lockstep::examples
