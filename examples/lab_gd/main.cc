// lockstep-lab-gd: the course lab "gradient descent vs stochastic gradient
// descent": the same linear regression solved with full-batch GD, SGD (one
// sample per step) and mini-batch SGD, for the same number of epochs (samples
// seen) and learning rate. Prints each method's loss, steps and time, writes
// loss per step, the (w, b) path and the loss surface for `lockstep report`
// with --run-dir (lab.jsonl).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/run_dir.h"
#include "lab_gd/regression.h"

namespace lab = lockstep::examples::lab;

namespace {

struct Flags {
  int64_t samples = 2000;
  int epochs = 20;
  double lr = 0.05;
  int64_t batch_size = 32;
  double noise = 1.0;
  double true_w = 3, true_b = 2;
  double start_w = -2, start_b = 6;
  uint64_t seed = 1;
  int points = 300;  // recorded points per method (evenly spaced steps)
  std::string run_dir;
};

struct Outcome {
  std::string method;
  int64_t steps;
  double final_loss, seconds;
  lab::Params p;
};

// Trains with batches of `batch` samples; the clock stops while the full
// loss is evaluated for the record, so "time" is training time only.
Outcome train(const Flags& f, const lab::Data& data, const std::string& method, int64_t batch,
              const lockstep::examples::RunDir& dir) {
  const auto n = static_cast<int64_t>(data.x.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(f.seed + 7);
  const int64_t per_epoch = (n + batch - 1) / batch, total = per_epoch * f.epochs;
  const int64_t every = std::max<int64_t>(1, total / f.points);
  lab::Params p{f.start_w, f.start_b};
  double seconds = 0;
  auto record = [&](int64_t s) {
    dir.append("lab.jsonl", {{"type", "step"},
                             {"method", method},
                             {"step", s},
                             {"time_s", seconds},
                             {"loss", lab::loss(data, p)},
                             {"w", p.w},
                             {"b", p.b}});
  };
  record(0);
  int64_t s = 0;
  for (int e = 0; e < f.epochs; ++e) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t begin = 0; begin < n; begin += batch) {
      const auto t0 = std::chrono::steady_clock::now();
      p = lab::step(data, order, begin, std::min(n, begin + batch), p, f.lr);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (++s % every == 0 || s == total) record(s);
    }
  }
  return {method, s, lab::loss(data, p), seconds, p};
}

void write_surface(const Flags& f, const lab::Data& data, const lockstep::examples::RunDir& dir) {
  const int n = 41;
  const double span =
      std::max({std::abs(f.start_w - f.true_w), std::abs(f.start_b - f.true_b), 1.0}) * 1.3;
  std::vector<double> ws, bs;
  for (int i = 0; i < n; ++i) ws.push_back(f.true_w - span + 2 * span * i / (n - 1));
  for (int i = 0; i < n; ++i) bs.push_back(f.true_b - span + 2 * span * i / (n - 1));
  std::vector<std::vector<double>> grid;
  for (double w : ws) {
    grid.emplace_back();
    for (double b : bs) grid.back().push_back(lab::loss(data, {w, b}));
  }
  dir.append("lab.jsonl", {{"type", "surface"}, {"w", ws}, {"b", bs}, {"loss", grid}});
}

int run(const Flags& f, int argc, char** argv) {
  if (f.samples < 2 || f.epochs < 1 || f.batch_size < 1 || !(f.lr > 0))
    throw lockstep::InvalidArgument("--samples >= 2, --epochs >= 1, --batch-size >= 1, --lr > 0");
  lockstep::examples::RunDir dir(f.run_dir, "lab-gd", argc, argv);
  const lab::Data data = lab::make_data(f.samples, {f.true_w, f.true_b}, f.noise, f.seed);
  const lab::Params best = lab::closed_form(data);
  write_surface(f, data, dir);
  std::vector<Outcome> out;
  out.push_back(train(f, data, "gradient descent", f.samples, dir));
  out.push_back(train(f, data, fmt::format("mini-batch {}", f.batch_size), f.batch_size, dir));
  out.push_back(train(f, data, "SGD (batch 1)", 1, dir));
  fmt::print("{} samples, {} epochs each, lr {}; least squares: w {:.4f} b {:.4f} loss {:.5f}\n",
             f.samples, f.epochs, f.lr, best.w, best.b, lab::loss(data, best));
  fmt::print("{:<18} {:>7} {:>11} {:>9} {:>9} {:>10}\n", "method", "steps", "final loss", "w", "b",
             "time (ms)");
  for (const auto& o : out) {
    fmt::print("{:<18} {:>7} {:>11.5f} {:>9.4f} {:>9.4f} {:>10.3f}\n", o.method, o.steps,
               o.final_loss, o.p.w, o.p.b, o.seconds * 1e3);
    dir.append("lab.jsonl", {{"type", "result"},
                             {"method", o.method},
                             {"steps", o.steps},
                             {"loss", o.final_loss},
                             {"w", o.p.w},
                             {"b", o.p.b},
                             {"seconds", o.seconds},
                             {"optimum_loss", lab::loss(data, best)}});
  }
  if (dir.enabled()) fmt::print("plot: lockstep report {} -o report.html\n", dir.dir());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab: gradient descent vs SGD vs mini-batch SGD on linear regression"};
  Flags f;
  app.add_option("--samples", f.samples, "data points")->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the data, the same for every method")
      ->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate, the same for every method")->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "mini-batch size")->capture_default_str();
  app.add_option("--noise", f.noise, "standard deviation of the noise on y")->capture_default_str();
  app.add_option("--seed", f.seed)->capture_default_str();
  app.add_option("--points", f.points, "recorded points per method")->capture_default_str();
  app.add_option("--run-dir", f.run_dir,
                 "write run.json and lab.jsonl there for `lockstep report`");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f, argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-lab-gd: {}\n", e.what());
    return 1;
  }
}
