#include "fashion_mnist/options.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "fashion_mnist/precision.h"
#include "lockstep/data/idx.h"
#include "lockstep/torch/state_dict.h"

namespace lockstep::examples {
namespace {

// CLI11's Range prints the whole double range ("2.2e-308 to 1.8e308"); these
// say what is allowed in words. They run on the text before conversion, so a
// non-number gets its own message here rather than CLI11's conversion code.
CLI::Validator number_in(double low, double high, bool low_open, std::string what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) throw std::invalid_argument(text);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number; expected {}", text, what);
        }
        const bool low_ok = low_open ? v > low : v >= low;
        if (!std::isfinite(v) || !low_ok || v > high)
          return fmt::format("{} is out of range; expected {}", text, what);
        return {};
      },
      "");  // the help text already says what is allowed
}

CLI::Validator at_least(double low, std::string what) {
  return number_in(low, std::numeric_limits<double>::max(), false, std::move(what));
}

// A folder that exists or can be created: a regular file there is refused
// now, not after the first epoch when the first checkpoint is written.
const CLI::Validator kDirectoryPath(
    [](std::string& path) -> std::string {
      std::error_code ec;
      auto status = std::filesystem::status(path, ec);
      if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
        return fmt::format("{} exists and is not a directory", path);
      return {};
    },
    "DIR");

// --export's extension picks the format (state_dict.h): a bad one is refused
// now, not after training.
const CLI::Validator kWeightsFile(
    [](std::string& path) -> std::string {
      try {
        lockstep::torch::format_for_extension(path);
        return {};
      } catch (const InvalidArgument& e) {
        return e.what();
      }
    },
    "FILE");

const CLI::Validator kDataFolder(
    [](std::string& path) -> std::string {
      if (std::filesystem::is_directory(path)) return {};
      return fmt::format(
          "folder {} does not exist; install the Debian package "
          "dataset-fashion-mnist (files in {}) or pass the folder that holds "
          "the IDX files or record shards",
          path, data::kFashionMnistDir);
    },
    "DIR");

}  // namespace

double Options::eval_interval() const {
  if (eval_every > 0) return eval_every;
  return target_accuracy > 0 ? 0.25 : 1.0;
}

void add_recipe_options(CLI::App& app, Options& o) {
  const char* g = "Recipe";
  app.add_option("--recipe", o.recipe,
                 "default (the values shown) | fast (time to accuracy: the default with "
                 "--channels1 16 --channels2 32 --flip 0 --tta none) | plain (the default "
                 "before 2026-11-24: 16/32 channels, no pool-first, channels-last, EMA, flip "
                 "or TTA); flags given explicitly win")
      ->check(CLI::IsMember({"default", "fast", "plain"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--epochs", o.epochs, "passes over the training set")
      ->check(at_least(1, "an integer >= 1"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--batch-size", o.batch_size, "samples per worker per step")
      ->check(at_least(1, "an integer >= 1"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--lr", o.lr, "base learning rate (one worker's)")
      ->check(number_in(0, 10, true, "a learning rate in (0, 10]"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--lr-scaling", o.lr_scaling, "lr multiplier by workers: none|linear|sqrt")
      ->check(CLI::IsMember({"none", "linear", "sqrt"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--warmup-epochs", o.warmup_epochs, "ramp from the base to the scaled lr")
      ->check(at_least(0, "a number of epochs >= 0"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--schedule", o.schedule,
                 "cosine (after warm-up, to 0 at the last epoch) | constant | one-cycle (up to "
                 "the scaled lr over --warmup-epochs, then down)")
      ->check(CLI::IsMember({"cosine", "constant", "one-cycle"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--optimizer", o.optimizer, "sgd|adam|lamb")
      ->check(CLI::IsMember({"sgd", "adam", "lamb"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--seed", o.seed, "model init and shuffling")->capture_default_str()->group(g);
  app.add_flag("--sync-batch-norm", o.sync_batch_norm, "batch statistics over all workers")
      ->group(g);
  app.add_option("--channels1", o.channels1, "width of the first conv")
      ->check(at_least(1, "an integer >= 1"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--channels2", o.channels2, "width of the second conv")
      ->check(at_least(1, "an integer >= 1"))
      ->capture_default_str()
      ->group(g);
  app.add_flag("--pool-first,!--no-pool-first", o.pool_first,
               "conv-maxpool-BN-ReLU blocks (BN and ReLU on a quarter of the pixels); on by "
               "default")
      ->capture_default_str()
      ->group(g);
  app.add_flag("--channels-last,!--no-channels-last", o.channels_last,
               "NHWC activations (LibTorch's CPU BN/ReLU/pool kernels are faster on them); on "
               "by default")
      ->capture_default_str()
      ->group(g);
  app.add_option("--label-smoothing", o.label_smoothing, "cross-entropy label smoothing")
      ->check(number_in(0, 0.999, false, "a fraction in [0, 1)"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--flip", o.flip, "probability of a random horizontal flip per training image")
      ->check(number_in(0, 1, false, "a probability in [0, 1]"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--tta", o.tta,
                 "test-time augmentation: none | flip (mean logits of the image "
                 "and its mirror; train with --flip)")
      ->check(CLI::IsMember({"none", "flip"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--ema", o.ema,
                 "evaluate an exponential moving average of the weights with "
                 "this decay, e.g. 0.99 (0: the weights themselves)")
      ->check(number_in(0, 0.999999, false, "a decay in [0, 1)"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--lookahead", o.lookahead,
                 "Lookahead: pull the weights towards slow weights "
                 "every K steps (0: off; not with elastic jobs)")
      ->check(at_least(0, "an integer >= 0 (0: off)"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--lookahead-alpha", o.lookahead_alpha, "Lookahead's slow step size")
      ->check(number_in(0, 1, true, "a fraction in (0, 1]"))
      ->capture_default_str()
      ->group(g);
}

void add_evaluation_options(CLI::App& app, Options& o) {
  const char* g = "Evaluation";
  app.add_option("--target-accuracy", o.target_accuracy,
                 "stop at the first evaluation with this test accuracy (a fraction, e.g. 0.9) "
                 "and print the time it took")
      ->check(number_in(0, 1, true, "a fraction in (0, 1], e.g. 0.9"))
      ->group(g);
  app.add_option("--eval-every", o.eval_every,
                 "evaluate on the test set every this fraction of an epoch (default: 0.25 with "
                 "--target-accuracy, else 1)")
      ->check(number_in(0, 1, true, "a fraction of an epoch in (0, 1]"))
      ->group(g);
}

void add_data_options(CLI::App& app, Options& o) {
  const char* g = "Data";
  o.data = data::kFashionMnistDir;
  app.add_option("--data", o.data,
                 "folder with the Fashion-MNIST IDX files, or with train/t10k written by "
                 "`lockstep convert idx --split train|t10k --format records|hdf5|lmdb --out DIR`")
      ->check(kDataFolder)
      ->capture_default_str()
      ->group(g);
  app.add_option("--bad-data", o.bad_data,
                 "a bad record in shards, HDF5 or LMDB: fail (name it and stop) or skip (drop it, "
                 "train on the rest and report how many)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str()
      ->group(g);
  app.add_option("--train-subset", o.train_subset, "use the first N training samples (0: all)")
      ->check(at_least(0, "an integer >= 0 (0: all)"))
      ->group(g);
  app.add_option("--test-subset", o.test_subset, "use the first N test samples (0: all)")
      ->check(at_least(0, "an integer >= 0 (0: all)"))
      ->group(g);
}

void add_run_options(CLI::App& app, Options& o) {
  const char* g = "Run";
  app.add_option("--device", o.device,
                 "where to train: cuda (the worker's GPU: local rank % visible GPUs), cpu, or "
                 "auto = cuda when LibTorch sees a GPU (default; same as LOCKSTEP_DEVICE)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->group(g);
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps (0: none)")
      ->check(at_least(0, "an integer >= 0 (0: no limit)"))
      ->group(g);
  app.add_option("--metrics", o.metrics,
                 "append one JSON line per epoch (and per --log-every steps) to FILE")
      ->group(g);
  app.add_option("--timeline", o.timeline, "write a Chrome-trace timeline of the collectives")
      ->group(g);
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoint.pt there each epoch")
      ->check(kDirectoryPath)
      ->group(g);
  app.add_option("--checkpoint-format", o.checkpoint_format,
                 "file: rank 0 writes checkpoint.pt; sharded: every rank writes its share of "
                 "step-<N>/ (safetensors; the last 2 kept); async: sharded, written in the "
                 "background while training goes on")
      ->check(CLI::IsMember({"file", "sharded", "async"}))
      ->capture_default_str()
      ->group(g);
  app.add_flag("--resume", o.resume,
               "continue from the newest checkpoint of --checkpoint-format in --checkpoint-dir "
               "if there is one")
      ->group(g);
  app.add_option("--init-from", o.init_from,
                 "start from these weights (a .safetensors, torch.save state_dict or lockstep "
                 "checkpoint file; every name, shape and dtype must match the model)")
      ->check(CLI::ExistingFile)
      ->group(g);
  app.add_option("--export", o.export_path,
                 "write the weights evaluated at the end (the --ema average if given) to FILE: "
                 ".safetensors, or .pt/.pth/.bin for torch.save")
      ->check(kWeightsFile)
      ->group(g);
  app.add_option("--commit-every", o.commit_every,
                 "elastic jobs (lockstep run --min-np): steps between in-memory commits; a lost "
                 "worker costs at most this many steps")
      ->check(at_least(0, "an integer >= 0 (0: commit at epoch ends only)"))
      ->capture_default_str()
      ->group(g);
}

void add_testing_options(CLI::App& app, Options& o) {
  const char* g = "Testing";
  app.add_option("--sample-log", o.sample_log,
                 "append 'epoch index' for every committed sample to FILE.<worker id> (to check "
                 "that no sample is trained twice across a re-formation)")
      ->group(g);
  app.add_option("--inject-kill", o.inject_kill,
                 "WORKER:STEP: the elastic worker with that id (w0, w1...) kills itself with "
                 "SIGKILL before that step")
      ->group(g);
}

void add_same_bits_options(CLI::App& app, Options& o) {
  const char* g = "Same bits";
  app.add_flag("--same-bits", o.same_bits,
               "train so that the full state after N steps is bitwise the same at every -np "
               "that divides --micro-batches (docs/same-bits.md); prints 'state hash: HEX' at "
               "the end")
      ->group(g);
  app.add_option("--global-batch", o.global_batch,
                 "--same-bits: samples per step over all workers, whatever -np")
      ->check(at_least(1, "an integer >= 1"))
      ->capture_default_str()
      ->group(g);
  app.add_option("--micro-batches", o.micro_batches,
                 "--same-bits: K passes of global-batch/K samples per step; -np must divide K")
      ->check(number_in(1, 1 << 20, false, "an integer in [1, 2^20]"))
      ->capture_default_str()
      ->group(g);
}

void check_same_bits(const CLI::App& app, const Options& o) {
  if (!o.same_bits) {
    for (const char* flag : {"--global-batch", "--micro-batches"})
      if (app.count(flag) > 0)
        throw CLI::ValidationError(flag,
                                   "only with --same-bits (without it the batch is "
                                   "--batch-size per worker)");
    return;
  }
  if (o.global_batch % o.micro_batches != 0)
    throw CLI::ValidationError(
        "--global-batch",
        fmt::format("--same-bits: {} samples do not split into --micro-batches {} of equal "
                    "size; give a multiple of {}",
                    o.global_batch, o.micro_batches, o.micro_batches));
  // What would make the result depend on -np, or is not covered by the hash.
  struct Refusal {
    bool given;
    const char *flag, *why;
  };
  const Refusal refusals[] = {
      {app.count("--batch-size") > 0, "--batch-size",
       "it is per worker, so the step would change with -np; give --global-batch (default 128)"},
      {o.compression != "none", "--compression",
       "each worker would compress a different share at each -np; --same-bits sums the "
       "gradients exactly in int64 instead"},
      {o.precision != "fp32", "--precision", "it covers fp32 training only"},
      {o.sync_batch_norm, "--sync-batch-norm",
       "its statistics span the workers; --same-bits normalises each micro-batch on its own "
       "(ghost BatchNorm)"},
      {o.optimizer == "lamb", "--optimizer",
       "lamb's state is not in the state hash; use sgd or adam"},
      {o.target_accuracy > 0, "--target-accuracy",
       "the stop is decided by a test-set evaluation, which is split by worker and not part of "
       "the guarantee; use --max-steps or --epochs"},
      {o.device == "cuda", "--device", "it trains on the CPU only"},
  };
  for (const auto& r : refusals)
    if (r.given) throw CLI::ValidationError(r.flag, fmt::format("not with --same-bits: {}", r.why));
}

void add_options(CLI::App& app, Options& o) {
  add_recipe_options(app, o);
  add_precision_flag(app, o.precision);
  add_compression_flags(app, o.compression, o.compression_warmup);
  add_evaluation_options(app, o);
  add_data_options(app, o);
  add_run_options(app, o);
  add_testing_options(app, o);
  add_telemetry_options(app, o);
  add_same_bits_options(app, o);
  // 1-bit Adam and 1-bit LAMB wrap one optimizer each: a wrong pairing is a
  // bad command line (status 2), not an error at the first step.
  app.callback([&app, &o] {
    check_same_bits(app, o);
    static constexpr std::pair<const char*, const char*> kWraps[] = {{"onebit-adam", "adam"},
                                                                     {"onebit-lamb", "lamb"}};
    for (const auto& [scheme, optimizer] : kWraps)
      if (o.compression == scheme && o.optimizer != optimizer)
        throw CLI::ValidationError(
            "--compression", fmt::format("{} needs --optimizer {} (it wraps that optimizer), not "
                                         "--optimizer {}",
                                         scheme, optimizer, o.optimizer));
  });
}

int parse_options(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One status for every bad command line, as the launcher uses.
    fmt::print(stderr, "{}: error: {}\nRun with --help for the flags.\n", app.get_name(), e.what());
    return 2;
  }
  return -1;
}

}  // namespace lockstep::examples
