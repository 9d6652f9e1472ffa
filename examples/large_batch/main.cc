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
// Prints a table and JSON lines; writes an SVG plot (accuracy against batch,
// one line per rule).
#include <CLI/CLI.hpp>
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
  uint64_t seed = 1;
  std::string data = lockstep::data::kFashionMnistDir;
  std::string svg = "large_batch.svg";
  std::string json;
  int64_t channels1 = 8, channels2 = 16;
};

struct Result {
  int64_t batch;
  std::string rule;
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
    return std::make_unique<lo::Lars>(
        model->parameters(),
        lo::LarsOptions(f.lars_lr).momentum(0.9).weight_decay(f.weight_decay).trust_coefficient(0.02));
  if (rule == "lamb-warmup")
    return std::make_unique<lo::Lamb>(model->parameters(),
                                      lo::LambOptions(f.lamb_lr).weight_decay(f.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      model->parameters(), torch::optim::SGDOptions(f.lr).momentum(0.9).weight_decay(f.weight_decay));
}

// Warm-up (linear from the base rate, Goyal et al.) then cosine to 0.
lo::Schedule make_schedule(const Flags& f, const std::string& rule, int64_t batch,
                           int64_t steps_per_epoch, int64_t total) {
  auto [peak, warm] = peak_lr(f, rule, batch);
  const int64_t warmup = warm ? std::max<int64_t>(1, std::llround(f.warmup_epochs * steps_per_epoch))
                              : 0;
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

Result run_one(const Flags& f, const FashionSplit& train, const FashionSplit& test,
               int64_t batch, const std::string& rule) {
  torch::manual_seed(f.seed);  // same initialisation for every run
  FashionCnn model(lockstep::examples::FashionCnnOptions{f.channels1, f.channels2, {}});
  auto opt = make_optimizer(f, rule, model);
  const int64_t steps_per_epoch = train.size() / batch;  // drop the ragged tail
  if (steps_per_epoch == 0)
    throw lockstep::InvalidArgument(fmt::format("batch {} exceeds the {} training samples", batch,
                                                train.size()));
  const int64_t total = steps_per_epoch * f.epochs;
  auto schedule = make_schedule(f, rule, batch, steps_per_epoch, total);
  auto shuffle = at::detail::createCPUGenerator(f.seed);
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
  return {batch, rule, evaluate(model, test), loss, seconds, peak_lr(f, rule, batch).first, total};
}

// Accuracy against log2(batch), one polyline per rule, by hand.
std::string svg_plot(const std::vector<Result>& results, const Flags& f) {
  const double w = 640, h = 420, left = 60, right = 170, top = 30, bottom = 50;
  const double x0 = std::log2(static_cast<double>(f.batches.front()));
  const double x1 = std::log2(static_cast<double>(f.batches.back()));
  auto px = [&](int64_t b) {
    double span = x1 > x0 ? x1 - x0 : 1;
    return left + (std::log2(static_cast<double>(b)) - x0) / span * (w - left - right);
  };
  auto py = [&](double acc) { return top + (1 - acc) * (h - top - bottom); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  std::ostringstream s;
  s << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                   "font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
  s << fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", w, h);
  s << fmt::format("<text x=\"{}\" y=\"18\" font-size=\"14\">Fashion-MNIST test accuracy after "
                   "{} epochs</text>\n", left, f.epochs);
  for (int tick = 0; tick <= 10; tick += 2) {
    double y = py(tick / 10.0);
    s << fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.1f}</text>\n",
                     left, y, w - right, y, left - 6, y + 4, tick / 10.0);
  }
  for (int64_t b : f.batches)
    s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(b),
                     h - bottom + 18, b);
  s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">global batch "
                   "(log scale)</text>\n", (left + w - right) / 2, h - 12);
  for (size_t r = 0; r < f.rules.size(); ++r) {
    const char* color = colors[r % 6];
    std::string points;
    for (const auto& res : results)
      if (res.rule == f.rules[r]) {
        points += fmt::format("{:.1f},{:.1f} ", px(res.batch), py(res.accuracy));
        s << fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                         px(res.batch), py(res.accuracy), color);
      }
    s << fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     points, color);
    const double ly = top + 20 + 20.0 * static_cast<double>(r);
    s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                     "stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     w - right + 10, ly, w - right + 30, ly, color, w - right + 36, ly + 4,
                     f.rules[r]);
  }
  s << "</svg>\n";
  return s.str();
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--epochs", f.epochs, "epochs per run (same for every batch)")->capture_default_str();
  app.add_option("--batches", f.batches, "global batch sizes")->delimiter(',')->capture_default_str();
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
  app.add_option("--seed", f.seed)->capture_default_str();
  app.add_option("--data", f.data, "Fashion-MNIST folder")->capture_default_str();
  app.add_option("--svg", f.svg, "plot file ('' for none)")->capture_default_str();
  app.add_option("--json", f.json, "also append the JSON lines to FILE");
  app.add_option("--channels1", f.channels1)->capture_default_str();
  app.add_option("--channels2", f.channels2)->capture_default_str();
}

int run(Flags f) {
  std::sort(f.batches.begin(), f.batches.end());  // the plot's x axis
  torch::set_num_threads(f.threads);
  FashionSplit train = lockstep::examples::load_fashion_split(f.data, "train", f.train_subset);
  FashionSplit test = lockstep::examples::load_fashion_split(f.data, "t10k", f.test_subset);
  std::vector<Result> results;
  std::ofstream json_file;
  if (!f.json.empty()) json_file.open(f.json, std::ios::app);
  for (int64_t batch : f.batches)
    for (const auto& rule : f.rules) {
      results.push_back(run_one(f, train, test, batch, rule));
      const auto& r = results.back();
      nlohmann::json line = {{"batch", r.batch},   {"rule", r.rule},   {"accuracy", r.accuracy},
                             {"loss", r.final_loss}, {"steps", r.steps}, {"peak_lr", r.peak_lr},
                             {"seconds", r.seconds}, {"epochs", f.epochs},
                             {"train_samples", train.size()}};
      fmt::print("{}\n", line.dump());
      if (json_file) json_file << line.dump() << "\n";
      std::fflush(stdout);
    }
  fmt::print("\n{:>6}  {:<14} {:>9} {:>6} {:>8} {:>10} {:>7}\n", "batch", "rule", "accuracy",
             "steps", "peak lr", "final loss", "sec");
  for (const auto& r : results)
    fmt::print("{:>6}  {:<14} {:>9.4f} {:>6} {:>8.4g} {:>10.4f} {:>7.1f}\n", r.batch, r.rule,
               r.accuracy, r.steps, r.peak_lr, r.final_loss, r.seconds);
  if (!f.svg.empty()) {
    std::ofstream(f.svg) << svg_plot(results, f);
    fmt::print("plot: {}\n", f.svg);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Large-batch study: test accuracy against global batch per lr rule"};
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-large-batch: {}\n", e.what());
    return 1;
  }
}
