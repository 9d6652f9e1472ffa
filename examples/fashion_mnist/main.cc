// lockstep-fashion-mnist: the README's main job. Data-parallel training of
// FashionCnn on Fashion-MNIST, one process per worker:
//
//   lockstep run -np 2 lockstep-fashion-mnist
//
// Also runs as a plain single process. docs/main-job.md describes the flags,
// the default recipe and the numbers it reaches. The pieces: options.h (the
// command line), trainer.h (the loop), evaluate.h, target.h (time to
// accuracy), same_bits_trainer.h (--same-bits), common/fashion_data.h
// (loading).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/fashion_data.h"
#include "fashion_mnist/options.h"
#include "fashion_mnist/recipe.h"
#include "fashion_mnist/run_dir_flag.h"
#include "fashion_mnist/same_bits_trainer.h"
#include "fashion_mnist/target.h"
#include "fashion_mnist/trainer.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/torch.h"

namespace {

namespace lt = lockstep::torch;
namespace ex = lockstep::examples;

ex::FashionSplit load(const ex::Options& o, const std::string& split, int64_t limit) {
  ex::FashionLoadOptions options{.limit = limit,
                                 .bad_data = o.bad_data == "skip"
                                                 ? lockstep::data::BadDataPolicy::kSkip
                                                 : lockstep::data::BadDataPolicy::kThrow};
  ex::FashionLoadReport report;
  ex::FashionSplit out = ex::load_fashion_split(o.data, split, options, &report);
  if (report.skipped > 0 && lt::rank() == 0) {
    fmt::print(stderr, "lockstep-fashion-mnist: --bad-data skip: skipped {} of {} {} records:\n",
               report.skipped, report.expected, split);
    for (const auto& reason : report.first_reasons) fmt::print(stderr, "  {}\n", reason);
  }
  return out;
}

void train_default(const ex::Options& o, ex::FashionSplit train, ex::FashionSplit test,
                   const ::torch::Device& device) {
  if (lt::rank() == 0)
    fmt::print(stderr,
               "lockstep-fashion-mnist: {} worker(s) x batch {}, {} training samples, "
               "{} intra-op thread(s) each, on {}\n",
               lt::size(), o.batch_size, train.size(), ::torch::get_num_threads(), device.str());
  ex::Trainer trainer(o, std::move(train), std::move(test));
  trainer.maybe_init_from();
  trainer.maybe_resume();
  trainer.run();
  trainer.print_state_hash();
}

void train_same_bits(const ex::Options& o, ex::FashionSplit train, ex::FashionSplit test) {
  if (lt::rank() == 0)
    fmt::print(stderr,
               "lockstep-fashion-mnist: same bits: global batch {} = {} micro-batches of "
               "{}, {} worker(s) (-np {} give the same bits), {} training samples, 1 intra-op "
               "thread each\n",
               o.global_batch, o.micro_batches, o.global_batch / o.micro_batches, lt::size(),
               fmt::join(lt::same_bits_world_sizes(o.micro_batches), ", "), train.size());
  ex::SameBitsTrainer trainer(o, std::move(train), std::move(test));
  trainer.maybe_init_from();
  trainer.maybe_resume();
  trainer.run();
}

// `run_dir` fills in --metrics, --timeline and --tensorboard, so it is applied here, once
// lt::init() knows the rank, and before the timeline starts.
int run(ex::Options o, const std::string& run_dir, int argc, char** argv) {
  // The placement (lt::init) reads the knob: the flag is its spelling here.
  // --same-bits trains on the CPU whatever LOCKSTEP_DEVICE says.
  if (o.same_bits) o.device = "cpu";
  if (!o.device.empty()) setenv("LOCKSTEP_DEVICE", o.device.c_str(), 1);
  lt::init();
  ex::apply_run_dir(run_dir, o.metrics, o.timeline, o.tensorboard, argc, argv);
  if (!o.timeline.empty()) lockstep::engine::global().start_timeline(o.timeline);
  ex::FashionSplit train = load(o, "train", o.train_subset);
  ex::FashionSplit test = load(o, "t10k", o.test_subset);
  // The whole data set lives on the worker's device (188 MB as f32).
  const ::torch::Device device = lt::placement().torch_device();
  for (ex::FashionSplit* split : {&train, &test}) {
    split->images = split->images.to(device);
    split->labels = split->labels.to(device);
  }
  if (lt::rank() == 0 && o.recipe != "default")
    fmt::print(stderr, "lockstep-fashion-mnist: recipe {}: {}\n", o.recipe, ex::describe_recipe(o));
  if (o.same_bits)
    train_same_bits(o, std::move(train), std::move(test));
  else
    train_default(o, std::move(train), std::move(test), device);
  if (!o.timeline.empty()) lockstep::engine::global().stop_timeline();
  lt::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ex::process_start();  // pins the wall-time origin
  CLI::App app{
      "Data-parallel Fashion-MNIST training (run it with: lockstep run -np 2 "
      "lockstep-fashion-mnist)",
      "lockstep-fashion-mnist"};
  ex::Options options;
  ex::add_options(app, options);
  std::string run_dir;
  ex::add_run_dir_flag(app, run_dir);
  if (int status = ex::parse_options(app, argc, argv); status >= 0) return status;
  ex::apply_recipe(app, options);
  try {
    return run(options, run_dir, argc, argv);
  } catch (const lockstep::engine::RemovedFromWorld& e) {
    fmt::print(stderr, "lockstep-fashion-mnist: leaving the job: {}\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-fashion-mnist: error: {}\n", e.what());
    return 1;
  }
}
