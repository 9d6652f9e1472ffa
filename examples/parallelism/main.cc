// lockstep-parallelism: one model (the Fashion-MNIST CNN with a wide MLP
// head, net.h) trained with any of lockstep's strategies, reporting per rank
// what each one costs:
//
//   lockstep run -np 2 lockstep-parallelism --strategy data|tensor|pipeline|zero|fsdp|ps
//       [--micro-batches M] [--schedule gpipe|1f1b] [--mesh data=2,tensor=2]
//       [--compression none|fp16|bf16|powersgd:R|onebit|onebit-adam|onebit-lamb]
//       [--checkpoint-activations K]
//       [--fsdp-unit K]
//       [--epochs E] [--json]
//   lockstep run -np 2 --servers 1 lockstep-parallelism --strategy ps   # dedicated server
//
// docs/parallelism.md explains the strategies and holds the measured table.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/fashion_data.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/torch/torch.h"
#include "strategies.h"

namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;
using lockstep::examples::FashionSplit;
using torch::Tensor;

namespace {

struct Flags {
  lockstep::examples::StrategyFlags s;
  int epochs = 1;
  std::string data = lockstep::data::kFashionMnistDir;
  int64_t train_subset = 0, test_subset = 0, max_steps = 0;
  bool json = false;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--strategy", f.s.strategy, "data|tensor|pipeline|zero|fsdp|ps")
      ->check(CLI::IsMember({"data", "tensor", "pipeline", "zero", "fsdp", "ps"}))
      ->capture_default_str();
  app.add_option("--mesh", f.s.mesh,
                 "tensor/pipeline: e.g. data=2,tensor=2 (default: the whole job on one dimension)");
  app.add_option("--micro-batches", f.s.micro_batches, "pipeline: micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--schedule", f.s.schedule, "pipeline: gpipe|1f1b")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))
      ->capture_default_str();
  app.add_option("--partition", f.s.partition,
                 "pipeline: layers per stage, e.g. 7,7 (default: balanced by parameter count)")
      ->delimiter(',');
  app.add_option("--zero-stage", f.s.zero_stage, "zero: 1 or 2")
      ->check(CLI::IsMember({1, 2}))
      ->capture_default_str();
  app.add_option("--fsdp-unit", f.s.fsdp_unit,
                 "fsdp: consecutive layers per flat-parameter unit (gathered together)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--servers", f.s.servers,
                 "ps: colocated servers among the workers (0: all; dedicated ones come from "
                 "`lockstep run --servers K`)")
      ->capture_default_str();
  app.add_option("--lr", f.s.lr, "Adam learning rate (scaled by sqrt of the data replicas)")
      ->capture_default_str();
  app.add_option("--batch-size", f.s.batch_size, "samples per data replica per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compression", f.s.compression,
                 "data: gradients on the wire as none|fp16|bf16|powersgd:R|onebit|onebit-adam|"
                 "onebit-lamb (1-bit Adam, or 1-bit LAMB with LAMB instead of Adam: momenta "
                 "after 4 warm-up steps)")
      ->capture_default_str();
  app.add_option("--checkpoint-activations", f.s.checkpoint_activations,
                 "recompute activations in backward, in segments of K layers (0: off; not tensor)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--data", f.data, "Fashion-MNIST folder (IDX files or record shards)")
      ->capture_default_str();
  app.add_option("--train-subset", f.train_subset, "first N training samples (0: all)");
  app.add_option("--test-subset", f.test_subset, "first N test samples (0: all)");
  app.add_option("--max-steps", f.max_steps, "stop training after this many steps (0: none)");
  app.add_flag("--json", f.json, "rank 0 ends with one JSON line of the results");
}

// Sums over the workers (f64).
std::vector<double> workers_sum(std::vector<double> values, const lt::Group& workers,
                                const std::string& name) {
  auto t = torch::tensor(values, torch::kFloat64);
  t = lt::allreduce(t, name, {.op = lockstep::comm::ReduceOp::kSum, .process_set = workers.id()});
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

double workers_max(double value, const lt::Group& workers, const std::string& name) {
  auto t = torch::tensor({value}, torch::kFloat64);
  return lt::allreduce(t, name, {.op = lockstep::comm::ReduceOp::kMax, .process_set = workers.id()})
      .item<double>();
}

// Each data replica evaluates its slice of the test set; ranks whose
// predictions count (one per replica) add up the correct answers.
double evaluate(lockstep::examples::Strategy& s, const FashionSplit& test) {
  torch::NoGradGuard no_grad;
  const int64_t n = test.size();
  const int64_t begin = n * s.data_rank / s.data_size, end = n * (s.data_rank + 1) / s.data_size;
  double correct = 0, seen = 0;
  for (int64_t i = begin; i < end; i += 1000) {
    const int64_t len = std::min<int64_t>(1000, end - i);
    auto logits = s.predict(test.images.narrow(0, i, len));
    if (!logits) continue;
    correct += logits->argmax(1).eq(test.labels.narrow(0, i, len)).sum().item<double>();
    seen += static_cast<double>(len);
  }
  auto sums = workers_sum({correct, seen}, s.workers, "eval");
  return sums[1] > 0 ? sums[0] / sums[1] : 0;
}

struct Totals {
  int64_t steps = 0, samples = 0;
  double seconds = 0, loss_sum = 0, loss_count = 0, idle_sum = 0, idle_count = 0;
  lockstep::comm::Traffic traffic;
};

Totals train(lockstep::examples::Strategy& s, const Flags& f, const FashionSplit& train_set) {
  lt::DistributedSampler sampler(
      {.dataset_size = train_set.size(), .rank = s.data_rank, .size = s.data_size, .seed = 42});
  Totals t;
  const auto traffic0 = lockstep::comm::traffic();
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const int64_t epoch_steps = sampler.num_batches(f.s.batch_size);
    int64_t step_in_epoch = 0;
    for (auto batch = sampler.next_batch(f.s.batch_size); !batch.empty();
         batch = sampler.next_batch(f.s.batch_size)) {
      if (f.max_steps > 0 && t.steps >= f.max_steps) break;
      auto index = torch::tensor(batch, torch::kInt64);
      auto loss = s.train_step(train_set.images.index_select(0, index),
                               train_set.labels.index_select(0, index));
      if (loss) {
        t.loss_sum += *loss;
        t.loss_count += 1;
      }
      if (auto idle = s.idle_fraction(); idle && t.steps > 0) {  // the first step agrees shapes
        t.idle_sum += *idle;
        t.idle_count += 1;
      }
      ++t.steps;
      t.samples += static_cast<int64_t>(batch.size()) * s.data_size;
      if (++step_in_epoch % std::max<int64_t>(1, epoch_steps / 10) == 0 && lt::rank() == 0) {
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        fmt::print(stderr, "epoch {}/{}: step {}/{}{} | {:.0f} samples/s\n", epoch + 1, f.epochs,
                   step_in_epoch, epoch_steps,
                   t.loss_count > 0 ? fmt::format(", loss {:.4f}", t.loss_sum / t.loss_count) : "",
                   static_cast<double>(t.samples) / elapsed);
      }
    }
  }
  s.settle();
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.traffic = lockstep::comm::traffic() - traffic0;
  return t;
}

int run(const Flags& f) {
  lt::init();
  if (lp::serve_if_dedicated_server()) {  // `lockstep run --servers K`: this rank only serves
    lt::shutdown();
    return 0;
  }
  FashionSplit train_set = lockstep::examples::load_fashion_split(f.data, "train", f.train_subset);
  FashionSplit test_set = lockstep::examples::load_fashion_split(f.data, "t10k", f.test_subset);
  auto flags = f.s;  // the same recipe at any scale: lr by sqrt of the global batch
  flags.lr *= std::sqrt(static_cast<double>(lockstep::examples::data_replicas(flags)));
  auto strategy = lockstep::examples::make_strategy(flags);
  auto& st = *strategy;
  const lt::Group workers = st.workers;
  if (lt::rank() == 0)
    fmt::print(stderr,
               "lockstep-parallelism: --strategy {} on {} worker(s), {} data replica(s) x "
               "batch {}, {} training samples\n",
               f.s.strategy, workers.size(), st.data_size, f.s.batch_size, train_set.size());
  Totals t = train(st, f, train_set);
  const double accuracy = evaluate(st, test_set);
  st.finish();

  const double sent = t.steps > 0 ? static_cast<double>(t.traffic.wire_bytes) / t.steps : 0;
  const double closed = st.closed_form_bytes_per_step(f.s.batch_size);
  const double idle = t.idle_count > 0 ? t.idle_sum / t.idle_count : 0;
  fmt::print(stderr,
             "rank {}: parameters {:.2f} MB, optimizer state {:.2f} MB, peak activations "
             "{:.2f} MB, sent {:.1f} KB/step (closed form {:.1f}){}\n",
             lt::rank(), st.param_bytes() / 1e6, st.optimizer_state_bytes() / 1e6,
             st.peak_activation_bytes / 1e6, sent / 1e3, closed / 1e3,
             t.idle_count > 0 ? fmt::format(", idle {:.1f}% of the step", 100 * idle) : "");
  const int w = workers.size();
  auto sums =
      workers_sum({sent, closed, idle, t.idle_count > 0 ? 1.0 : 0.0}, workers, "report.sum");
  const double params_max = workers_max(static_cast<double>(st.param_bytes()), workers, "report.p");
  const double state_max =
      workers_max(static_cast<double>(st.optimizer_state_bytes()), workers, "report.o");
  const double act_max =
      workers_max(static_cast<double>(st.peak_activation_bytes), workers, "report.a");
  const double sent_max = workers_max(sent, workers, "report.s");
  const double samples_per_s = t.seconds > 0 ? static_cast<double>(t.samples) / t.seconds : 0;
  if (lt::rank() == 0) {
    fmt::print(stderr, "test accuracy {:.2f}% | {:.0f} samples/s | {} steps in {:.1f} s\n",
               100 * accuracy, samples_per_s, t.steps, t.seconds);
    if (f.json) {
      nlohmann::json line = {{"strategy", f.s.strategy},
                             {"np", lt::size()},
                             {"workers", w},
                             {"compression", f.s.compression},
                             {"checkpoint_activations", f.s.checkpoint_activations},
                             {"servers", lp::dedicated_servers()},
                             {"mesh", f.s.mesh},
                             {"data_replicas", st.data_size},
                             {"batch_per_replica", f.s.batch_size},
                             {"epochs", f.epochs},
                             {"steps", t.steps},
                             {"train_seconds", t.seconds},
                             {"test_acc", accuracy},
                             {"samples_per_s", samples_per_s},
                             {"param_bytes_per_rank", params_max},
                             {"optimizer_state_bytes_per_rank", state_max},
                             {"activation_bytes_per_rank", act_max},
                             {"bytes_sent_per_step", sums[0] / w},
                             {"bytes_sent_per_step_max", sent_max},
                             {"bytes_sent_per_step_closed_form", sums[1] / w}};
      if (f.s.strategy == "pipeline") {
        const int p = w / st.data_size, m = f.s.micro_batches;
        line["micro_batches"] = m;
        line["schedule"] = f.s.schedule;
        line["bubble_measured"] = sums[3] > 0 ? sums[2] / sums[3] : 0;
        line["bubble_theory"] = static_cast<double>(p - 1) / (m + p - 1);
      }
      if (f.s.strategy == "fsdp") line["fsdp_unit"] = f.s.fsdp_unit;
      if (f.s.strategy == "zero") {
        line["zero_stage"] = f.s.zero_stage;
        line["zero_gather_overlap"] = st.gather_overlap;
      }
      fmt::print("{}\n", line.dump());
    }
  }
  lt::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "One model, every parallel strategy (run it with: lockstep run -np 2 "
      "lockstep-parallelism --strategy tensor)"};
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-parallelism: error: {}\n", e.what());
    return 1;
  }
}
