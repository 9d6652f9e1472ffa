#include "fashion_mnist/same_bits_trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/progress.h"
#include "fashion_mnist/evaluate.h"
#include "fashion_mnist/recipe.h"
#include "fashion_mnist/trainer.h"
#include "lockstep/base/error.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/state_dict.h"

namespace lockstep::examples {
namespace lt = lockstep::torch;
// Named, because the unity build puts trainer.cc in the same translation unit.
namespace same_bits_trainer_impl {
namespace {

// One worker's batch in the default recipe: --lr-scaling counts the global
// batch in these, so 128 scales the lr as today's -np 2 does.
constexpr double kReferenceBatch = 64;

double lr_scale(const std::string& scaling, double workers) {
  if (scaling == "linear") return workers;
  if (scaling == "sqrt") return std::sqrt(workers);
  return 1.0;
}

void refuse_elastic() {
  // A re-formation restores state through ElasticState, which this loop
  // does not keep (docs/same-bits.md: the library-level elastic test).
  if (lockstep::engine::elastic_enabled())
    throw InvalidArgument(
        "--same-bits does not run in elastic jobs (lockstep run --min-np); "
        "start it with a fixed -np, and --resume from --checkpoint-dir at "
        "another -np instead");
}

}  // namespace
}  // namespace same_bits_trainer_impl
namespace sbt = same_bits_trainer_impl;

SameBitsTrainer::SameBitsTrainer(const Options& options, FashionSplit train, FashionSplit test)
    : o_(options),
      train_(std::move(train)),
      test_(std::move(test)),
      model_((sbt::refuse_elastic(), make_model(o_, /*rank=*/0))),  // the same weights everywhere
      optimizer_(make_optimizer(o_, model_)),
      order_({.dataset_size = train_.size(), .rank = 0, .size = 1, .seed = o_.seed}),
      evals_(o_.eval_interval(), 0),
      telemetry_(o_),
      checkpoints_(o_, /*elastic=*/false) {
  lt::SameBitsOptions same;
  same.micro_batches = o_.micro_batches;
  same.seed = o_.seed;
  try {
    driver_.emplace(*model_, *optimizer_, same);
  } catch (const InvalidArgument& e) {  // a -np that does not divide K
    throw InvalidArgument(fmt::format("--same-bits at -np {}: {} (--micro-batches {})", lt::size(),
                                      e.what(), o_.micro_batches));
  }
  steps_per_epoch_ = train_.size() / o_.global_batch;
  if (steps_per_epoch_ == 0)
    throw InvalidArgument(
        fmt::format("--global-batch {} is larger than the {} training samples; "
                    "give a smaller one",
                    o_.global_batch, train_.size()));
  total_epochs_ = o_.epochs;
  if (o_.max_steps > 0)
    total_epochs_ = std::min<double>(
        o_.epochs, static_cast<double>(o_.max_steps) / static_cast<double>(steps_per_epoch_));
  peak_lr_ = o_.lr * sbt::lr_scale(o_.lr_scaling,
                                   static_cast<double>(o_.global_batch) / sbt::kReferenceBatch);
  if (o_.ema > 0) ema_.emplace(*model_, optim::WeightEmaOptions{.decay = o_.ema});
}

void SameBitsTrainer::maybe_init_from() {
  if (o_.init_from.empty()) return;
  lt::load_state_dict(o_.init_from, *model_);
  if (ema_) ema_.emplace(*model_, optim::WeightEmaOptions{.decay = o_.ema});
  if (lt::rank() == 0) fmt::print(stderr, "initial weights from {}\n", o_.init_from);
}

// Every rank loads the same file; the step count places the run in the
// global order, so any supported world size continues it alike. An --ema
// average restarts from the loaded weights (evaluation only).
void SameBitsTrainer::maybe_resume() {
  if (!o_.resume || o_.checkpoint_dir.empty()) return;
  lt::TrainingProgress progress;
  if (!checkpoints_.load(*model_, *optimizer_, progress)) return;
  driver_->set_steps_done(progress.step);
  if (ema_) ema_.emplace(*model_, optim::WeightEmaOptions{.decay = o_.ema});
  if (lt::rank() == 0)
    fmt::print(stderr, "resumed from {} at step {}\n", checkpoints_.where(), progress.step);
}

void SameBitsTrainer::run() {
  for (int64_t epoch = driver_->steps_done() / steps_per_epoch_; epoch < o_.epochs && !done();
       ++epoch)
    train_epoch(epoch);
  checkpoints_.wait();  // an async save's error ends the job here
  const std::string hash = finish();
  if (!o_.export_path.empty() && lt::rank() == 0) {
    std::optional<optim::WeightEma::Applied> averaged;
    if (ema_) averaged.emplace(ema_->apply_to(*model_));
    lt::save_state_dict(o_.export_path, *model_);
  }
  if (lt::rank() == 0) {
    fmt::print("state hash: {}\n", hash);
    std::fflush(stdout);
  }
}

void SameBitsTrainer::train_epoch(int64_t epoch) {
  if (order_.epoch() != epoch) order_.set_epoch(epoch);
  ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, o_.epochs), steps_per_epoch_,
                  lt::rank() == 0);
  correct_ = seen_ = 0;
  double loss_sum = 0;
  int64_t steps = 0;
  const auto start = Clock::now();
  clock_.resume();
  for (int64_t in_epoch = driver_->steps_done() % steps_per_epoch_;
       in_epoch < steps_per_epoch_ && !done(); ++in_epoch) {
    const auto step_start = Clock::now();
    checkpoints_.poll();  // a failed async write is raised at the next step
    const double lr = lr_at(o_, peak_lr_, total_epochs_, train_.size(), epochs_done());
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    const double loss = driver_->step(
        [&](const lt::MicroBatch& micro) { return micro_batch_loss(micro, in_epoch); });
    if (ema_) ema_->update(*model_);
    loss_sum += loss;
    ++steps;
    bar.update(in_epoch + 1, loss_sum / static_cast<double>(steps),
               seen_ > 0 ? correct_ / seen_ : 0, static_cast<double>(steps * o_.global_batch));
    telemetry_.after_step(
        {.step = driver_->steps_done(),
         .epochs_done = epochs_done(),
         .loss = loss,
         .samples = o_.global_batch / lt::size(),
         .lr = lr,
         .step_s = std::chrono::duration<double>(Clock::now() - step_start).count(),
         .wait_s = 0},
        [this] { return gradient_norm(*model_); });
    if (in_epoch + 1 < steps_per_epoch_ && evals_.due(epochs_done())) evaluate_now(true);
  }
  clock_.pause();
  end_epoch(epoch, steps, loss_sum, std::chrono::duration<double>(Clock::now() - start).count());
}

// The samples of micro-batch `micro`: positions step_in_epoch * G + index * m
// .. + m of the epoch's global order, whichever rank runs it.
::torch::Tensor SameBitsTrainer::micro_batch_loss(const lt::MicroBatch& micro,
                                                  int64_t step_in_epoch) {
  const int64_t m = o_.global_batch / o_.micro_batches;
  const int64_t first = step_in_epoch * o_.global_batch + micro.index * m;
  auto index = ::torch::tensor(
      std::vector<int64_t>(order_.indices().begin() + first, order_.indices().begin() + first + m),
      ::torch::kInt64);
  auto x = random_flip(input(o_, train_.images.index_select(0, index)), o_.flip);
  auto y = train_.labels.index_select(0, index);
  auto logits = model_->forward(x);
  correct_ += logits.argmax(1).eq(y).sum().item<double>();
  seen_ += static_cast<double>(m);
  return loss(o_, logits, y);
}

void SameBitsTrainer::evaluate_now(bool mid_epoch) {
  clock_.pause();
  {
    std::optional<optim::WeightEma::Applied> averaged;
    if (ema_) averaged.emplace(ema_->apply_to(*model_));
    last_accuracy_ = evaluate(
        *model_, [this](const ::torch::Tensor& x) { return eval_logits(o_, model_, x); }, test_);
  }
  evals_.record(epochs_done(), last_accuracy_, clock_);
  telemetry_.evaluated(driver_->steps_done(), epochs_done(), last_accuracy_);
  if (lt::rank() == 0 && mid_epoch)
    fmt::print(stderr, "  {:.2f} epochs: test acc {:.2f}% | {:.1f} s training\n", epochs_done(),
               100 * last_accuracy_, clock_.seconds());
  clock_.resume();
}

void SameBitsTrainer::end_epoch(int64_t epoch, int64_t steps, double loss_sum, double seconds) {
  lt::Tally accuracy;  // every rank's micro-batches: the whole global batch
  accuracy.add(correct_, seen_);
  const double train_accuracy = accuracy.global_value("same_bits.train_accuracy");
  evaluate_now(/*mid_epoch=*/false);
  save(epoch);
  if (lt::rank() != 0) return;
  const double loss = steps > 0 ? loss_sum / static_cast<double>(steps) : 0;
  const double samples = static_cast<double>(steps * o_.global_batch);
  const double elapsed = std::chrono::duration<double>(Clock::now() - process_start()).count();
  fmt::print(stderr,
             "epoch {}/{}: train loss {:.4f} acc {:.2f}% | test acc {:.2f}% | {:.0f} samples/s "
             "| {:.1f} s\n",
             epoch + 1, o_.epochs, loss, 100 * train_accuracy, 100 * last_accuracy_,
             seconds > 0 ? samples / seconds : 0, elapsed);
  nlohmann::json line = {{"epoch", epoch + 1},
                         {"step", driver_->steps_done()},
                         {"epochs_done", epochs_done()},
                         {"train_loss", loss},
                         {"train_accuracy", train_accuracy},
                         {"test_accuracy", last_accuracy_},
                         {"samples_per_s", seconds > 0 ? samples / seconds : 0},
                         {"epoch_seconds", seconds},
                         {"train_s", clock_.seconds()},
                         {"elapsed_s", elapsed},
                         {"workers", lt::size()},
                         {"same_bits", true},
                         {"global_batch", o_.global_batch},
                         {"micro_batches", o_.micro_batches},
                         {"lr", peak_lr_},
                         {"precision", o_.precision},
                         {"compression", o_.compression}};
  telemetry_.epoch_ended(driver_->steps_done(), line);
  if (!o_.metrics.empty()) std::ofstream(o_.metrics, std::ios::app) << line.dump() << "\n";
}

void SameBitsTrainer::save(int64_t epoch) {
  if (!checkpoints_.enabled()) return;
  checkpoints_.save(*model_, *optimizer_,
                    {.epoch = epoch, .step = driver_->steps_done(), .sampler = {}, .user = {}});
}

// Every rank's hash must be rank 0's (SameBitsStep keeps the ranks' states
// identical); a difference is a bug, so it stops the job rather than print.
std::string SameBitsTrainer::finish() {
  const uint64_t mine = lt::state_hash(*model_, *optimizer_);
  auto all = lt::allgather(::torch::tensor({static_cast<int64_t>(mine)}, ::torch::kInt64),
                           "same_bits.state_hash");
  for (int64_t r = 0; r < all.numel(); ++r)
    if (static_cast<uint64_t>(all[r].item<int64_t>()) != mine)
      throw Error(
          fmt::format("--same-bits: rank {} holds another state than rank {} "
                      "({:016x} vs {:016x}); please report this",
                      r, lt::rank(), static_cast<uint64_t>(all[r].item<int64_t>()), mine));
  return fmt::format("{:016x}", mine);
}

double SameBitsTrainer::epochs_done() const {
  return static_cast<double>(driver_->steps_done()) / static_cast<double>(steps_per_epoch_);
}

}  // namespace lockstep::examples
