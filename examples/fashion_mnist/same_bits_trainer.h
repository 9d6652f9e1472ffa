// The main job with --same-bits (docs/same-bits.md): FashionCnn trained
// through lockstep::torch::SameBitsStep, so that the full state after N
// steps (parameters, BatchNorm statistics, optimizer state) is bitwise the
// same at every -np that divides --micro-batches.
//
// What it keeps independent of -np, besides what SameBitsStep does:
// - the batch: each step takes --global-batch samples (default 128, the
//   default recipe's 2 x 64), cut into K micro-batches of global/K;
// - the data order: one permutation per epoch from --seed (a sampler of
//   rank 0 of 1 on every rank); an epoch is floor(N / global) steps, the
//   last partial batch is dropped;
// - the schedule: the default one, with --lr-scaling applied as if there
//   were global/64 workers (sqrt(2) x the base lr at 128, as today's -np 2);
// - the initial weights: every rank builds them from --seed alone.
// Augmentation draws from the per-micro-batch streams SameBitsStep seeds.
// Evaluation (test accuracy, the EMA's view) is reported but not part of
// the guarantee: its batches are split by worker.
//
// One per process, used from one thread; owns the model, the optimizer and
// the step driver; the data splits are moved in. Elastic jobs are refused.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "common/fashion_cnn.h"
#include "common/fashion_data.h"
#include "fashion_mnist/checkpoints.h"
#include "fashion_mnist/options.h"
#include "fashion_mnist/target.h"
#include "fashion_mnist/telemetry.h"
#include "lockstep/optim/weight_average.h"
#include "lockstep/torch/same_bits.h"
#include "lockstep/torch/torch.h"

namespace lockstep::examples {

class SameBitsTrainer {
 public:
  // Throws InvalidArgument in an elastic job, for a -np that does not divide
  // --micro-batches (naming the sizes that do), or a --global-batch larger
  // than the training set.
  SameBitsTrainer(const Options& options, FashionSplit train, FashionSplit test);
  SameBitsTrainer(const SameBitsTrainer&) = delete;
  SameBitsTrainer& operator=(const SameBitsTrainer&) = delete;

  void maybe_init_from();  // --init-from, on every rank
  void maybe_resume();     // --resume: at any world size the design supports
  // Trains to the end (--epochs or --max-steps), evaluating each epoch, then
  // checks that every rank holds the same state and rank 0 prints
  // `state hash: HEX` on stdout.
  void run();

 private:
  void train_epoch(int64_t epoch);
  ::torch::Tensor micro_batch_loss(const lockstep::torch::MicroBatch& micro, int64_t step_in_epoch);
  void evaluate_now(bool mid_epoch);
  void end_epoch(int64_t epoch, int64_t steps, double loss_sum, double seconds);
  void save(int64_t epoch);
  std::string finish();  // the agreed hash
  double epochs_done() const;
  bool done() const { return o_.max_steps > 0 && driver_->steps_done() >= o_.max_steps; }

  const Options& o_;
  FashionSplit train_, test_;
  FashionCnn model_;
  std::unique_ptr<::torch::optim::Optimizer> optimizer_;
  std::optional<lockstep::torch::SameBitsStep> driver_;
  lockstep::torch::DistributedSampler order_;  // rank 0 of 1: the global order
  int64_t steps_per_epoch_ = 0;
  double total_epochs_ = 0, peak_lr_ = 0;
  std::optional<optim::WeightEma> ema_;
  double correct_ = 0, seen_ = 0;  // this rank's micro-batches in the epoch
  double last_accuracy_ = 0;
  TrainingClock clock_;
  EvalSchedule evals_;
  Telemetry telemetry_;
  JobCheckpoints checkpoints_;  // --checkpoint-dir in --checkpoint-format
};

}  // namespace lockstep::examples
