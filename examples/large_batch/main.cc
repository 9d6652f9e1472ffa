// lockstep-large-batch: how far can the global batch grow at a fixed number
// of epochs, and which learning-rate rule keeps accuracy?
//
// One process simulates a global batch B: each step averages the gradients
// of B/micro micro-batches (batch-norm statistics per micro-batch, as with
// one data-parallel worker per micro-batch), then steps once. For every
// batch size and rule it trains FashionCnn from the same initialisation for
// the same number of epochs and reports the final test accuracy:
//
//   none          SGD, base lr                                  (cosine)
//   linear        SGD, base lr · B/B_ref                        (cosine)
//   linear-warmup SGD, warm-up from base to base · B/B_ref      (then cosine)
//   lars-warmup   LARS, lars-lr · sqrt(B/B_ref), warm-up        (then cosine)
//   lamb-warmup   LAMB, lamb-lr · sqrt(B/B_ref), warm-up        (then cosine)
//
// Every (seed, batch, rule) cell is one training run. Prints a JSON line per
// cell and a table per (batch, rule) over the seeds: the mean with the best
// and worst seed dropped (as MLPerf drops the fastest and slowest of its
// runs), min and max. With --run-dir the cells go to DIR/results.jsonl as
// they finish and a second start skips the cells already there, so a long
// study survives being killed; --shard I/N splits the cells between
// processes that share one DIR. `lockstep report DIR` plots it.
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/fashion_cnn.h"
#include "common/fashion_data.h"
#include "common/run_dir.h"
#include "lockstep/optim/apply_schedule.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/optim/lars.h"
#include "lockstep/optim/schedule.h"

namespace lo = lockstep::optim;
using lockstep::examples::FashionCnn;
using lockstep::examples::FashionSplit;

namespace {

struct Flags {
  int epochs = 3;
  std::vector<int64_t> batches = {64, 512, 4096};
  std::vector<std::string> rules = {"none", "linear", "linear-warmup", "lars-warmup",
                                    "lamb-warmup"};
  int64_t reference_batch = 64;
  int64_t micro_batch = 512;
  double lr = 0.05;        // SGD at the reference batch
  double lars_lr = 0.5;    // LARS global rate at the reference batch
  double lamb_lr = 0.005;  // LAMB at the reference batch
  double weight_decay = 5e-4;
  double warmup_epochs = 0.5;
  int64_t train_subset = 12288;
  int64_t test_subset = 2000;
  int threads = 2;
  std::vector<uint64_t> seeds = {1};
  std::string data = lockstep::data::kFashionMnistDir;
  std::string json;
  std::string run_dir;
  std::string shard = "0/1";
  int64_t channels1 = 8, channels2 = 16;
};

struct Result {
  int64_t batch;
  std::string rule;
  uint64_t seed;
  double accuracy, final_loss, seconds, peak_lr;
  int64_t steps;
};

double ratio(const Flags& f, int64_t batch) {
  return static_cast<double>(batch) / static_cast<double>(f.reference_batch);
}

// The rule's peak rate and whether it warms up to it.
std::pair<double, bool> peak_lr(const Flags& f, const std::string& rule, int64_t batch) {
  if (rule == "none") return {f.lr, false};
  if (rule == "linear") return {f.lr * ratio(f, batch), false};
  if (rule == "linear-warmup") return {f.lr * ratio(f, batch), true};
  if (rule == "lars-warmup") return {f.lars_lr * std::sqrt(ratio(f, batch)), true};
  return {f.lamb_lr * std::sqrt(ratio(f, batch)), true};
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& f, const std::string& rule,
                                                        FashionCnn& model) {
  if (rule == "lars-warmup")
    return std::make_unique<lo::Lars>(model->parameters(), lo::LarsOptions(f.lars_lr)
                                                               .momentum(0.9)
                                                               .weight_decay(f.weight_decay)
                                                               .trust_coefficient(0.02));
  if (rule == "lamb-warmup")
    return std::make_unique<lo::Lamb>(model->parameters(),
                                      lo::LambOptions(f.lamb_lr).weight_decay(f.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      model->parameters(),
      torch::optim::SGDOptions(f.lr).momentum(0.9).weight_decay(f.weight_decay));
}

// Warm-up (linear from the base rate, Goyal et al.) then cosine to 0.
lo::Schedule make_schedule(const Flags& f, const std::string& rule, int64_t batch,
                           int64_t steps_per_epoch, int64_t total) {
  auto [peak, warm] = peak_lr(f, rule, batch);
  const int64_t warmup =
      warm ? std::max<int64_t>(1, std::llround(f.warmup_epochs * steps_per_epoch)) : 0;
  if (warmup == 0 || warmup >= total) return lo::cosine_decay(peak, total);
  return lo::warmup(peak / ratio(f, batch), warmup, lo::cosine_decay(peak, total - warmup));
}

double evaluate(FashionCnn& model, const FashionSplit& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  double correct = 0;
  for (int64_t i = 0; i < test.size(); i += 1000) {
    const int64_t len = std::min<int64_t>(1000, test.size() - i);
    auto logits = model->forward(test.images.narrow(0, i, len));
    correct += logits.argmax(1).eq(test.labels.narrow(0, i, len)).sum().item<double>();
  }
  model->train();
  return correct / static_cast<double>(test.size());
}

// One optimizer step over a global batch, gradients averaged over its
// micro-batches. Returns the batch's mean loss.
double global_step(FashionCnn& model, torch::optim::Optimizer& opt, const FashionSplit& train,
                   const torch::Tensor& index, int64_t micro) {
  opt.zero_grad();
  double loss_sum = 0;
  const int64_t batch = index.size(0);
  for (int64_t i = 0; i < batch; i += micro) {
    auto part = index.narrow(0, i, std::min(micro, batch - i));
    auto loss = torch::nn::functional::cross_entropy(
        model->forward(train.images.index_select(0, part)), train.labels.index_select(0, part),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    (loss / static_cast<double>(batch)).backward();
    loss_sum += loss.item<double>();
  }
  opt.step();
  return loss_sum / static_cast<double>(batch);
}

Result run_one(const Flags& f, const FashionSplit& train, const FashionSplit& test, int64_t batch,
               const std::string& rule, uint64_t seed) {
  torch::manual_seed(seed);  // same initialisation for every cell of a seed
  FashionCnn model(lockstep::examples::FashionCnnOptions{f.channels1, f.channels2, {}});
  auto opt = make_optimizer(f, rule, model);
  const int64_t steps_per_epoch = train.size() / batch;  // drop the ragged tail
  if (steps_per_epoch == 0)
    throw lockstep::InvalidArgument(
        fmt::format("batch {} exceeds the {} training samples", batch, train.size()));
  const int64_t total = steps_per_epoch * f.epochs;
  auto schedule = make_schedule(f, rule, batch, steps_per_epoch, total);
  auto shuffle = at::detail::createCPUGenerator(seed);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  int64_t step = 0;
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    auto order = torch::randperm(train.size(), shuffle, torch::kInt64);
    for (int64_t s = 0; s < steps_per_epoch; ++s, ++step) {
      lo::apply(schedule, *opt, step);
      loss = global_step(model, *opt, train, order.narrow(0, s * batch, batch), f.micro_batch);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {batch, rule, seed, evaluate(model, test), loss, seconds, peak_lr(f, rule, batch).first,
          total};
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--epochs", f.epochs, "epochs per run (same for every batch)")
      ->capture_default_str();
  app.add_option("--batches", f.batches, "global batch sizes")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--rules", f.rules, "none,linear,linear-warmup,lars-warmup,lamb-warmup")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "linear", "linear-warmup", "lars-warmup", "lamb-warmup"}))
      ->capture_default_str();
  app.add_option("--reference-batch", f.reference_batch, "batch the base rates are for")
      ->capture_default_str();
  app.add_option("--micro-batch", f.micro_batch, "samples per forward pass (one simulated worker)")
      ->capture_default_str();
  app.add_option("--lr", f.lr, "SGD rate at the reference batch")->capture_default_str();
  app.add_option("--lars-lr", f.lars_lr, "LARS global rate at the reference batch")
      ->capture_default_str();
  app.add_option("--lamb-lr", f.lamb_lr, "LAMB rate at the reference batch")->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay)->capture_default_str();
  app.add_option("--warmup-epochs", f.warmup_epochs)->capture_default_str();
  app.add_option("--train-subset", f.train_subset, "first N training samples (0: all)")
      ->capture_default_str();
  app.add_option("--test-subset", f.test_subset, "first N test samples (0: all)")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "torch intra-op threads")->capture_default_str();
  app.add_option("--seeds", f.seeds, "one run per seed for every cell (init and shuffling)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--data", f.data, "Fashion-MNIST folder")->capture_default_str();
  app.add_option("--json", f.json, "also append the JSON lines to FILE");
  app.add_option("--run-dir", f.run_dir,
                 "write run.json and results.jsonl there for `lockstep report`; cells already "
                 "in results.jsonl are not run again (resume)");
  app.add_option("--shard", f.shard,
                 "I/N: run only cells I, I+N, I+2N... (processes sharing a "
                 "--run-dir)")
      ->capture_default_str();
  app.add_option("--channels1", f.channels1)->capture_default_str();
  app.add_option("--channels2", f.channels2)->capture_default_str();
}

struct Cell {
  uint64_t seed;
  int64_t batch;
  std::string rule;
};

// At the reference batch "linear" is "none" step for step (k = 1, no
// warm-up): the same run, so it is copied instead of trained again.
bool is_copy_of_none(const Flags& f, const std::string& rule, int64_t batch) {
  return rule == "linear" && batch == f.reference_batch &&
         std::find(f.rules.begin(), f.rules.end(), "none") != f.rules.end();
}

// Seed-major order, so a study stopped early has whole seeds of every cell.
std::vector<Cell> cells_of(const Flags& f) {
  std::vector<Cell> cells;
  for (uint64_t seed : f.seeds)
    for (int64_t batch : f.batches)
      for (const auto& rule : f.rules)
        if (!is_copy_of_none(f, rule, batch)) cells.push_back({seed, batch, rule});
  return cells;
}

std::pair<int, int> parse_shard(const std::string& text) {
  int index = -1, count = 0;
  char slash = 0;
  std::istringstream in(text);
  in >> index >> slash >> count;
  if (!in || slash != '/' || count < 1 || index < 0 || index >= count || !in.eof())
    throw lockstep::InvalidArgument(
        fmt::format("--shard '{}': expected I/N with 0 <= I < N, e.g. 0/2", text));
  return {index, count};
}

nlohmann::json to_json(const Result& r, const Flags& f, int64_t train_samples) {
  return {{"batch", r.batch},     {"rule", r.rule},
          {"seed", r.seed},       {"accuracy", r.accuracy},
          {"loss", r.final_loss}, {"steps", r.steps},
          {"peak_lr", r.peak_lr}, {"seconds", r.seconds},
          {"epochs", f.epochs},   {"train_samples", train_samples}};
}

// Results of an earlier start with the same budget; a different budget in
// the same directory would mix incomparable numbers, so it is refused.
std::vector<Result> load_done(const lockstep::examples::RunDir& dir, const Flags& f,
                              int64_t train_samples) {
  std::vector<Result> done;
  for (const auto& j : dir.read_lines("results.jsonl")) {
    if (j.value("epochs", -1) != f.epochs || j.value("train_samples", int64_t{-1}) != train_samples)
      throw lockstep::InvalidArgument(fmt::format(
          "--run-dir {} holds results for {} epochs on {} samples, not {} on {}; use another "
          "directory",
          dir.dir(), j.value("epochs", -1), j.value("train_samples", int64_t{-1}), f.epochs,
          train_samples));
    done.push_back({j.at("batch").get<int64_t>(), j.at("rule").get<std::string>(),
                    j.at("seed").get<uint64_t>(), j.at("accuracy").get<double>(),
                    j.value("loss", 0.0), j.value("seconds", 0.0), j.value("peak_lr", 0.0),
                    j.value("steps", int64_t{0})});
  }
  return done;
}

bool is_done(const std::vector<Result>& done, const Cell& c) {
  return std::any_of(done.begin(), done.end(), [&](const Result& r) {
    return r.seed == c.seed && r.batch == c.batch && r.rule == c.rule;
  });
}

// Mean without the best and the worst seed (with 3 or more seeds).
double trimmed_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.size() >= 3) v = std::vector<double>(v.begin() + 1, v.end() - 1);
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

void print_table(const Flags& f, const std::vector<Result>& results) {
  fmt::print("\n{:>6}  {:<14} {:>5} {:>9} {:>8} {:>8} {:>6} {:>8}  {}\n", "batch", "rule", "seeds",
             "trimmed", "min", "max", "steps", "peak lr", "accuracy per seed");
  for (int64_t batch : f.batches)
    for (const auto& rule : f.rules) {
      std::vector<double> acc;
      std::string per_seed;
      int64_t steps = 0;
      double peak = 0;
      for (const auto& r : results)
        if (r.batch == batch && r.rule == rule) {
          acc.push_back(r.accuracy);
          per_seed += fmt::format("{}:{:.4f} ", r.seed, r.accuracy);
          steps = r.steps;
          peak = r.peak_lr;
        }
      if (acc.empty()) continue;
      fmt::print("{:>6}  {:<14} {:>5} {:>9.4f} {:>8.4f} {:>8.4f} {:>6} {:>8.4g}  {}\n", batch, rule,
                 acc.size(), trimmed_mean(acc), *std::min_element(acc.begin(), acc.end()),
                 *std::max_element(acc.begin(), acc.end()), steps, peak, per_seed);
    }
  fmt::print("trimmed: mean accuracy without the best and worst seed (3+ seeds)\n");
}

// The "linear" results at the reference batch, copied from "none".
void add_copies(const Flags& f, std::vector<Result>& results, const lockstep::examples::RunDir& dir,
                std::ofstream& json_file, int64_t train_samples) {
  for (size_t i = 0, n = results.size(); i < n; ++i) {
    Result r = results[i];
    if (r.rule != "none" || !is_copy_of_none(f, "linear", r.batch) ||
        is_done(results, {r.seed, r.batch, "linear"}))
      continue;
    r.rule = "linear";
    r.seconds = 0;
    results.push_back(r);
    auto line = to_json(r, f, train_samples);
    line["same_as"] = "none";
    fmt::print("{}\n", line.dump());
    if (json_file) json_file << line.dump() << "\n" << std::flush;
    dir.append("results.jsonl", line);
  }
}

int run(Flags f, int argc, char** argv) {
  // glibc's heap trimming and mmap'd activations cost ~30% of each step in
  // system time here (measured: 3.9 s of sys per epoch without, 0.3 s with).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::sort(f.batches.begin(), f.batches.end());
  const auto [shard, shards] = parse_shard(f.shard);
  torch::set_num_threads(f.threads);
  FashionSplit train = lockstep::examples::load_fashion_split(f.data, "train", f.train_subset);
  FashionSplit test = lockstep::examples::load_fashion_split(f.data, "t10k", f.test_subset);
  lockstep::examples::RunDir dir(
      f.run_dir, "large-batch", argc, argv,
      {{"epochs", f.epochs}, {"train_samples", train.size()}, {"test_samples", test.size()}});
  std::vector<Result> results = load_done(dir, f, train.size());
  std::ofstream json_file;
  if (!f.json.empty()) json_file.open(f.json, std::ios::app);
  const auto cells = cells_of(f);
  size_t todo = 0;
  for (size_t i = 0; i < cells.size(); ++i)
    todo += (static_cast<int>(i % shards) == shard && !is_done(results, cells[i]));
  if (!results.empty())
    fmt::print(stderr, "lockstep-large-batch: {} cell(s) already in {}, {} to run in shard {}/{}\n",
               results.size(), dir.path("results.jsonl"), todo, shard, shards);
  size_t ran = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    if (static_cast<int>(i % shards) != shard || is_done(results, c)) continue;
    results.push_back(run_one(f, train, test, c.batch, c.rule, c.seed));
    const auto line = to_json(results.back(), f, train.size());
    fmt::print("[{}/{}] {}\n", ++ran, todo, line.dump());
    if (json_file) json_file << line.dump() << "\n" << std::flush;
    dir.append("results.jsonl", line);
    std::fflush(stdout);
  }
  // Other shards may have finished cells meanwhile: the table shows them all.
  if (dir.enabled()) results = load_done(dir, f, train.size());
  add_copies(f, results, dir, json_file, train.size());
  print_table(f, results);
  if (dir.enabled()) fmt::print("plot: lockstep report {} -o report.html\n", dir.dir());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Large-batch study: test accuracy against global batch per lr rule"};
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-large-batch: {}\n", e.what());
    return 1;
  }
}
