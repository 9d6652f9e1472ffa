// `lockstep bench engine` (lockstep run -np 2 lockstep bench engine [--json]):
// a ResNet-50 gradient set (161 tensors, 25.6 M f32) enqueued in backward
// order every step through the engine, against one raw Communicator
// allreduce of the same bytes, with fusion on and off, and with the timeline;
// and against the same pieces the engine runs, as raw allreduces.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/engine/engine.h"
#include "tools/bench_engine/resnet50.h"
#include "tools/common/cli_checks.h"

namespace lockstep::bench {
namespace {

using Clock = std::chrono::steady_clock;
using engine::DataType;
using engine::ReduceOp;

struct Options {
  int steps = 10;
  int warmup = 2;
  int rounds = 3;
  std::string sweep;  // comma-separated thresholds, e.g. "0,1MiB,64MiB"
  bool timeline = true;
  bool json = false;
};

struct Result {
  std::string mode;
  int64_t threshold = -1;
  double median_ms = 0, mean_ms = 0;
  bool raw_pieces = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Result summarize(std::string mode, int64_t threshold, const std::vector<double>& ms,
                 bool raw_pieces) {
  return {std::move(mode), threshold, median(ms),
          ms.empty() ? 0 : std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size(), raw_pieces};
}

// An engine mode's median over the raw pieces of the same threshold: the
// engine's own per-operation cost, apart from how fast the allreduce runs at
// those sizes (pieces that fit in cache can beat one big allreduce). 0: none.
double vs_pieces(const Result& r, const std::vector<Result>& all) {
  if (r.raw_pieces || r.threshold < 0) return 0;
  for (const auto& p : all)
    if (p.raw_pieces && p.threshold == r.threshold && p.median_ms > 0)
      return r.median_ms / p.median_ms;
  return 0;
}

struct Gradients {
  std::vector<ParamShape> params = resnet50_parameters();
  std::vector<std::vector<float>> data;
  size_t bytes = 0;
  Gradients() {
    if (params.size() != kResNet50Tensors)
      throw Error(fmt::format("resnet50 table has {} tensors, expected {}", params.size(),
                              kResNet50Tensors));
    int64_t total = 0;
    for (const auto& p : params) {
      data.emplace_back(static_cast<size_t>(p.elements()), 0.5f);
      total += p.elements();
    }
    if (total != kResNet50Parameters)
      throw Error(
          fmt::format("resnet50 table has {} parameters, expected {}", total, kResNet50Parameters));
    bytes = static_cast<size_t>(total) * sizeof(float);
  }
};

std::vector<double> time_raw(comm::Communicator& comm, size_t bytes, const Options& o) {
  std::vector<float> flat(bytes / sizeof(float), 0.5f);
  std::vector<double> ms;
  comm.barrier();
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    auto t0 = Clock::now();
    comm.allreduce(flat.data(), flat.size(), DataType::kFloat32, ReduceOp::kAverage);
    if (i >= o.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

// The allreduce sizes the engine runs for one step at `threshold`, without the
// engine: plan_batches' first-fit packing over the tensors in backward order
// (all ready at once, as this benchmark enqueues them), where tensors above
// threshold / 8 run alone (engine::detail::largest_fused_tensor). Threshold
// 0: one allreduce per tensor.
std::vector<size_t> raw_pieces(const Gradients& g, size_t threshold) {
  std::vector<size_t> sizes;
  std::vector<bool> taken(g.params.size(), false);
  auto bytes = [&](size_t k) {
    return static_cast<size_t>(g.params[k].elements()) * sizeof(float);
  };
  const size_t largest = threshold / 8;
  for (size_t i = g.params.size(); i-- > 0;) {
    if (taken[i]) continue;
    taken[i] = true;
    size_t batch = bytes(i);
    const bool packs = batch <= largest;
    for (size_t j = i; packs && j-- > 0 && batch < threshold;) {
      if (taken[j] || bytes(j) > largest || batch + bytes(j) > threshold) continue;
      batch += bytes(j);
      taken[j] = true;
    }
    sizes.push_back(batch);
  }
  if (std::accumulate(sizes.begin(), sizes.end(), size_t{0}) != g.bytes)
    throw Error(fmt::format("raw pieces at threshold {} do not cover the {} gradient bytes",
                            threshold, g.bytes));
  return sizes;
}

// The same pieces as raw Communicator allreduces, back to back: what the
// engine's fused (or unfused) step would cost with zero per-operation overhead.
// Unfused (threshold 0) pieces reduce the gradient tensors themselves, as the
// engine does (separate allocations page and cache differently from one
// flat buffer); fused pieces reduce consecutive ranges of one flat buffer.
std::vector<double> time_raw_pieces(comm::Communicator& comm, Gradients& g, size_t threshold,
                                    std::vector<float>& flat, const Options& o) {
  const std::vector<size_t> pieces = raw_pieces(g, threshold);
  std::vector<double> ms;
  comm.barrier();
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    auto t0 = Clock::now();
    if (threshold == 0) {
      for (size_t k = g.data.size(); k-- > 0;)
        comm.allreduce(g.data[k].data(), g.data[k].size(), DataType::kFloat32, ReduceOp::kAverage);
    } else {
      size_t offset = 0;
      for (size_t bytes : pieces) {
        comm.allreduce(flat.data() + offset, bytes / sizeof(float), DataType::kFloat32,
                       ReduceOp::kAverage);
        offset += bytes / sizeof(float);
      }
    }
    if (i >= o.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

// One training step's worth of gradients, last layer first.
void engine_step(engine::Engine& e, Gradients& g) {
  std::vector<engine::Handle> handles;
  handles.reserve(g.params.size());
  for (size_t k = g.params.size(); k-- > 0;) {
    auto& p = g.params[k];
    handles.push_back(e.allreduce_async(p.name, g.data[k].data(), g.data[k].data(), p.shape,
                                        DataType::kFloat32, ReduceOp::kAverage));
  }
  for (auto& h : handles) h.wait();
}

std::vector<double> time_engine(engine::Engine& e, Gradients& g, size_t threshold,
                                const Options& o) {
  e.set_fusion_threshold(threshold);
  e.barrier();
  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    auto t0 = Clock::now();
    engine_step(e, g);
    if (i >= o.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

// The whole gradient as one tensor through the engine.
std::vector<double> time_engine_flat(engine::Engine& e, std::vector<float>& flat,
                                     const Options& o) {
  e.barrier();
  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    auto t0 = Clock::now();
    e.allreduce_async("flat", flat.data(), flat.data(), {static_cast<int64_t>(flat.size())},
                      DataType::kFloat32, ReduceOp::kAverage)
        .wait();
    if (i >= o.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

std::vector<int64_t> parse_sweep(const std::string& text) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(static_cast<int64_t>(parse_bytes(item, "--sweep")));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void report(const std::vector<Result>& results, const Gradients& g, int ranks, const Options& o) {
  double raw = results[0].median_ms, one = results[1].median_ms;
  if (o.json) {
    for (const auto& r : results)
      std::printf("%s\n", nlohmann::json{{"bench", "engine"},
                                         {"mode", r.mode},
                                         {"ranks", ranks},
                                         {"tensors", g.params.size()},
                                         {"bytes", g.bytes},
                                         {"threshold_bytes", r.threshold},
                                         {"step_ms_median", r.median_ms},
                                         {"step_ms_mean", r.mean_ms},
                                         {"vs_raw", r.median_ms / raw},
                                         {"vs_one_tensor", r.median_ms / one},
                                         {"vs_raw_pieces", vs_pieces(r, results)}}
                              .dump()
                              .c_str());
    return;
  }
  std::printf(
      "lockstep bench engine: ResNet-50 gradients, %zu tensors, %.1f MiB f32, %d ranks, "
      "%d rounds x %d steps\n",
      g.params.size(), g.bytes / 1048576.0, ranks, o.rounds, o.steps);
  std::printf("%-22s %10s %15s %13s %8s %11s %10s\n", "mode", "threshold", "step ms median",
              "step ms mean", "vs raw", "vs 1 tensor", "vs pieces");
  for (const auto& r : results) {
    double p = vs_pieces(r, results);
    std::printf("%-22s %10s %15.2f %13.2f %7.3fx %10.3fx %9s\n", r.mode.c_str(),
                r.threshold < 0 ? "-" : fmt::format("{}", r.threshold).c_str(), r.median_ms,
                r.mean_ms, r.median_ms / raw, r.median_ms / one,
                p > 0 ? fmt::format("{:.3f}x", p).c_str() : "-");
  }
  std::printf(
      "raw: one Communicator allreduce of all the bytes (a communicator of its own); "
      "1 tensor: the same through the engine; raw pieces: the allreduces the engine runs "
      "at that threshold, back to back on the raw communicator (vs pieces = the engine's "
      "own cost); all modes interleaved round by round\n");
}

struct Mode {
  Mode(std::string n, int64_t t, bool with_timeline = false, bool pieces = false)
      : name(std::move(n)), threshold(t), timeline(with_timeline), raw_pieces(pieces) {}
  std::string name;
  int64_t threshold;  // -1: raw communicator, -2: one engine tensor
  bool timeline;
  bool raw_pieces;  // raw communicator allreduces of the engine's pieces at `threshold`
  std::vector<double> ms;
};

// Modes alternate round by round so that drifting machine load hits them all
// alike; each round runs `steps` timed steps per mode.
int run(const Options& o) {
  auto comm = comm::Communicator::from_environment();
  const int ranks = comm->size();
  Gradients g;
  engine::EngineConfig config = engine::EngineConfig::from_knobs();
  config.autotune = false;
  // LOCKSTEP_TIMELINE traces the whole run; the overhead mode needs it off.
  const bool timeline_mode = o.timeline && config.timeline_path.empty();
  const auto fused = static_cast<int64_t>(config.fusion_threshold);
  std::vector<Mode> modes;
  modes.emplace_back("raw allreduce", -1);
  modes.emplace_back("engine one tensor", -2);
  modes.emplace_back("engine fused", fused);
  modes.emplace_back("engine no fusion", 0);
  modes.emplace_back("raw fused pieces", fused, false, true);
  modes.emplace_back("raw per tensor", 0, false, true);
  if (timeline_mode) modes.emplace_back("engine fused+timeline", fused, true);
  for (int64_t t : parse_sweep(o.sweep)) modes.emplace_back("engine sweep", t);

  // The raw baseline runs on a second communicator of its own (a job id of
  // its own: its own shared segment), so it takes its turn in every round
  // like the engine modes: this VM's speed changes within seconds.
  comm::WorldInfo raw_world = comm->world();
  raw_world.job_id += "-raw";
  auto raw_comm = comm::Communicator::create(raw_world);
  engine::Engine e(std::move(comm), config);
  std::string path = fmt::format("/tmp/lockstep-bench-engine-{}.json", getpid());
  std::vector<float> flat(g.bytes / sizeof(float), 0.5f);
  for (int round = 0; round < o.rounds; ++round)
    for (auto& m : modes) {
      if (m.raw_pieces) {
        e.barrier();
        auto ms = time_raw_pieces(*raw_comm, g, static_cast<size_t>(m.threshold), flat, o);
        m.ms.insert(m.ms.end(), ms.begin(), ms.end());
        continue;
      }
      if (m.threshold == -1) {
        e.barrier();  // both ranks done with the engine's previous mode
        auto ms = time_raw(*raw_comm, g.bytes, o);
        m.ms.insert(m.ms.end(), ms.begin(), ms.end());
      }
      if (m.threshold == -2) {
        auto ms = time_engine_flat(e, flat, o);
        m.ms.insert(m.ms.end(), ms.begin(), ms.end());
      }
      if (m.threshold < 0) continue;
      if (m.timeline) e.start_timeline(path);
      auto ms = time_engine(e, g, static_cast<size_t>(m.threshold), o);
      if (m.timeline) e.stop_timeline();
      m.ms.insert(m.ms.end(), ms.begin(), ms.end());
    }
  if (timeline_mode && e.rank() == 0) ::unlink(path.c_str());
  int rank = e.rank();
  e.shutdown();
  std::vector<Result> results;
  for (const auto& m : modes) results.push_back(summarize(m.name, m.threshold, m.ms, m.raw_pieces));
  if (rank == 0) report(results, g, ranks, o);
  return 0;
}

}  // namespace
}  // namespace lockstep::bench

int main(int argc, char** argv) {
  lockstep::bench::Options o;
  CLI::App app{"lockstep bench engine: ResNet-50 gradient allreduce through the engine"};
  using lockstep::cli::at_least;
  app.add_option("--steps", o.steps, "timed steps per mode and round")->check(at_least(1));
  app.add_option("--warmup", o.warmup, "untimed steps per mode and round")->check(at_least(0));
  app.add_option("--rounds", o.rounds, "rounds; modes alternate within each")->check(at_least(1));
  app.add_option("--sweep", o.sweep, "also time these fusion thresholds, e.g. 0,1MiB,16MiB,64MiB");
  app.add_flag("!--no-timeline", o.timeline, "skip the timeline-overhead run");
  app.add_flag("--json", o.json, "JSON lines instead of a table");
  if (auto status = lockstep::cli::parse_or_status(app, argc, argv)) return *status;
  try {
    return lockstep::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep bench engine: %s\n", e.what());
    return 1;
  }
}
