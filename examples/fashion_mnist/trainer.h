// The main job's training loop: data-parallel FashionCnn with
// DistributedOptimizer, evaluation every --eval-every of an epoch, the
// time-to-target clock, checkpoints and elastic commits.
//
// One Trainer per process, used from one thread. It owns the model, the
// optimizer and the sampler; the data splits are moved in.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "common/fashion_cnn.h"
#include "common/fashion_data.h"
#include "fashion_mnist/checkpoints.h"
#include "fashion_mnist/options.h"
#include "fashion_mnist/precision.h"
#include "fashion_mnist/target.h"
#include "fashion_mnist/telemetry.h"
#include "lockstep/optim/weight_average.h"
#include "lockstep/torch/torch.h"

namespace lockstep::examples {

struct EpochStats {
  double loss = 0, accuracy = 0, samples_per_s = 0, seconds = 0;
  int64_t steps = 0;
};

// --optimizer as a LibTorch optimizer over the model's parameters at --lr.
std::unique_ptr<::torch::optim::Optimizer> make_optimizer(const Options& o, FashionCnn& model);

class Trainer {
 public:
  Trainer(const Options& options, FashionSplit train, FashionSplit test);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // --init-from: loads the file's weights (every rank reads it; checked
  // against the model first). Call before maybe_resume, which overrides it.
  void maybe_init_from();
  // Continues from --checkpoint-dir when --resume is given and one exists.
  void maybe_resume();
  // Trains to the end (all epochs, --max-steps or the target). In an elastic
  // job (lockstep run --min-np) this survives lost and added workers.
  void run();
  const EvalSchedule& evals() const { return evals_; }
  // Rank 0 prints `state hash: HEX` (lockstep::torch::state_hash: rank 0's
  // parameters, buffers, optimizer state) on stdout, the line --same-bits
  // prints, so runs can be compared; here it changes with -np.
  void print_state_hash() const;

 private:
  void train();
  void start_averages();
  EpochStats train_epoch(int64_t epoch);
  void step(const std::vector<int64_t>& batch, double& loss_sum, double& correct);
  // Evaluates now (the training clock stops meanwhile); true when the
  // target was reached.
  bool evaluate_now(bool mid_epoch);
  void report_epoch(int64_t epoch, const EpochStats& stats, double test_accuracy);
  void report_target_line();
  void commit();
  void save(int64_t epoch);
  void load_averages(int64_t step);
  void export_weights();
  void maybe_inject_kill() const;
  double lr_now() const;
  double epochs_done() const;
  bool done() const;

  const Options& o_;
  FashionSplit train_, test_;
  FashionCnn model_;
  std::unique_ptr<::torch::optim::Optimizer> optimizer_;
  StepPrecision precision_;
  lockstep::torch::DistributedOptimizer distributed_;
  lockstep::torch::DistributedSampler sampler_;
  lockstep::torch::ElasticState state_;
  const bool elastic_;
  JobCheckpoints checkpoints_{o_, elastic_};  // --checkpoint-dir, --checkpoint-format
  double total_epochs_ = 0, peak_lr_ = 0;
  std::optional<optim::WeightEma> ema_;        // --ema: evaluated instead of the weights
  std::optional<optim::Lookahead> lookahead_;  // --lookahead
  std::vector<int64_t> uncommitted_;
  TrainingClock clock_;
  EvalSchedule evals_;
  double last_accuracy_ = 0;
  bool reached_ = false;  // the target; training stops
  Telemetry telemetry_;   // per-step rows and TensorBoard events (rank 0 writes)
};

}  // namespace lockstep::examples
