// The main job's command line: every flag, its default and its validation.
//
// All values are checked while parsing, before any data is loaded or any
// worker is contacted: a bad value exits with status 2 and a message naming
// the flag. Flags are added in groups (add_*_options); another feature adds
// its own group in its own file and calls it from add_options().
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace lockstep::examples {

struct Options {
  // Recipe
  // The defaults below are the default recipe (docs/main-job.md); --recipe
  // fast and plain change the flags not given (recipe.h: apply_recipe).
  std::string recipe = "default";  // default | fast | plain
  int epochs = 4;
  int64_t batch_size = 64;  // per worker
  double lr = 2e-3;         // base: one worker's
  std::string lr_scaling = "sqrt";
  double warmup_epochs = 0;
  std::string schedule = "cosine";
  std::string optimizer = "adam";  // sgd | adam | lamb
  uint64_t seed = 42;
  bool sync_batch_norm = false;
  int64_t channels1 = 32, channels2 = 64;
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (fashion_mnist/precision.h)
  // none | powersgd:R | onebit | onebit-adam | onebit-lamb (precision.h)
  std::string compression = "none";
  int64_t compression_warmup = 100;  // uncompressed steps first
  bool pool_first = true;            // conv-pool-BN-ReLU blocks
  bool channels_last = true;         // NHWC activations
  double label_smoothing = 0;
  double flip = 0.5;         // probability of a horizontal flip per training sample
  std::string tta = "flip";  // test-time augmentation: none|flip
  double ema = 0.99;         // evaluate an EMA of the weights with this decay (0: off)
  int64_t lookahead = 0;     // Lookahead every k steps (0: off)
  double lookahead_alpha = 0.5;
  // Evaluation and time to accuracy
  double target_accuracy = 0;  // 0: train all epochs
  double eval_every = 0;       // fraction of an epoch; 0: 1/4 with a target, else 1
  // Data
  std::string data;
  std::string bad_data = "fail";
  int64_t train_subset = 0;
  int64_t test_subset = 0;
  // Run control and output
  int64_t max_steps = 0;
  std::string device;  // cpu | cuda | auto; empty: LOCKSTEP_DEVICE (default auto)
  std::string metrics;
  std::string timeline;
  std::string checkpoint_dir;
  std::string checkpoint_format = "file";  // file | sharded | async (checkpoints.h)
  bool resume = false;
  std::string init_from;      // weights loaded before training (state_dict.h's formats)
  std::string export_path;    // the evaluated weights written at the end (.safetensors, .pt)
  int64_t commit_every = 10;  // elastic: steps between in-memory commits
  // Telemetry (telemetry.h)
  std::string tensorboard;  // event files' folder; --run-dir fills it in
  int64_t log_every = 10;   // steps between per-step rows (0: none)
  bool log_ranks = false;   // per-rank scalars too
  // Testing
  std::string sample_log;   // append "epoch index" per committed sample to FILE.<worker>
  std::string inject_kill;  // "WORKER:STEP": that worker SIGKILLs itself
  // Same bits at any world size (same_bits_trainer.h, docs/same-bits.md)
  bool same_bits = false;
  int64_t global_batch = 128;  // samples per step over all workers (today's 2 x 64)
  int64_t micro_batches = 8;   // K: the world sizes that divide it give the same bits

  // Evaluations per epoch fraction after defaults are applied.
  double eval_interval() const;
};

void add_recipe_options(CLI::App& app, Options& o);
void add_evaluation_options(CLI::App& app, Options& o);
void add_data_options(CLI::App& app, Options& o);
void add_run_options(CLI::App& app, Options& o);
void add_testing_options(CLI::App& app, Options& o);
void add_telemetry_options(CLI::App& app, Options& o);  // telemetry.cc
void add_same_bits_options(CLI::App& app, Options& o);
// After parsing: --global-batch/--micro-batches only with --same-bits, and
// the flags that cannot give the same bits at every world size refused by
// name (CLI::ValidationError, status 2).
void check_same_bits(const CLI::App& app, const Options& o);

// All of the above.
void add_options(CLI::App& app, Options& o);

// Parses argv; returns the exit status to leave with (0 after --help, 2 with
// the message printed for any bad flag) or -1 to go on.
int parse_options(CLI::App& app, int argc, char** argv);

}  // namespace lockstep::examples
