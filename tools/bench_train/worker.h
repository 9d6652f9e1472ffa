// One measured training run of FashionCnn on synthetic Fashion-MNIST-shaped
// batches (the data pipeline is not what this benchmark measures).
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::bench_train {

struct WorkerConfig {
  // "plain" (no lockstep at all), "plain-malloc" (plain + lockstep's malloc
  // thresholds only) or "lockstep"
  std::string variant;
  // lockstep variants: "data" (DistributedOptimizer), "fsdp"
  // (FullyShardedModel, one unit per conv block and one for the head) or
  // "same-bits" (SameBitsStep, 8 micro-batches of batch_size * workers).
  std::string strategy = "data";
  int threads = 0;  // plain: intra-op threads; lockstep: 0 = placement's choice
  int64_t batch_size = 64;
  // "cpu" or "cuda" (plain: GPU 0; lockstep: LOCKSTEP_DEVICE, the placement's GPU).
  std::string device = "cpu";
  int warmup_steps = 20;
  int window_steps = 40;
  int windows = 3;
};

struct WorkerResult {
  double samples_per_s = 0;    // whole job (all workers), median window
  double comm_wait_share = 0;  // share of step time blocked in synchronize() (fsdp: in step())
  double step_ms = 0;          // median window's mean step time
  int workers = 1;
  int threads = 1;
};

// Runs the measurement; on lockstep it is collective (all workers call it).
WorkerResult run_worker(const WorkerConfig& config);

}  // namespace lockstep::bench_train
