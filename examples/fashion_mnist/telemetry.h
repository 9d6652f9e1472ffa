// The main job's telemetry (docs/report.md): every --log-every optimizer
// steps a per-step row in metrics.jsonl ("kind": "step") and TensorBoard
// scalars, the epoch's values and every evaluation as scalars, and the run's
// configuration as text. TensorBoard event files go to --tensorboard DIR
// (--run-dir DIR sets it to DIR).
//
// Rank 0 writes. Every rank calls after_step() each step: with --log-ranks,
// each due step is a collective (every rank's step time, communication wait
// and loss gathered to rank 0 for the rank_K/ tags), so every rank must call
// it at the same steps, as the training loop does.
//
// Not thread-safe: the training thread drives it. Owns the event file.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fashion_mnist/options.h"
#include "lockstep/summary/event_writer.h"

namespace lockstep::examples {

// The L2 norm of every parameter's gradient together (after the allreduce:
// the averaged gradient, the same on every rank).
double gradient_norm(const ::torch::nn::Module& model);

// One optimizer step as the training loop saw it.
struct StepSample {
  int64_t step = 0;        // global step count after this step
  double epochs_done = 0;  // fractional epochs after it
  double loss = 0;         // this rank's batch loss
  int64_t samples = 0;     // this rank's batch size
  double lr = 0;           // the learning rate the step used
  double step_s = 0;       // wall time of the whole step
  double wait_s = 0;       // of which in the optimizer step (gradient allreduce wait + update)
};

class Telemetry {
 public:
  // Call after lockstep::torch::init(). Rank 0 opens the event file and
  // writes the configuration text (in an elastic job, whichever worker is
  // rank 0 when it first writes).
  explicit Telemetry(const Options& o);

  // Every rank, after each step. `grad_norm` is called on rank 0 at due steps only.
  void after_step(const StepSample& s, const std::function<double()>& grad_norm);
  // Rank 0 (others return): the test accuracy of an evaluation at `step`.
  void evaluated(int64_t step, double epochs_done, double accuracy);
  // Rank 0: the epoch's metrics.jsonl line as TensorBoard scalars at `step`.
  void epoch_ended(int64_t step, const nlohmann::json& epoch_line);

 private:
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  summary::EventWriter* events();  // rank 0 with --tensorboard, else null
  nlohmann::json gather_ranks(double step_ms, double wait_share, double loss) const;
  void write_row(const StepSample& s, double grad_norm, const nlohmann::json& ranks);

  const Options& o_;
  const int64_t every_;
  std::optional<summary::EventWriter> events_;  // rank 0 with --tensorboard
  // The window since the last row.
  double loss_sum_ = 0, step_s_ = 0, wait_s_ = 0;
  int64_t samples_ = 0, steps_ = 0;
};

}  // namespace lockstep::examples
