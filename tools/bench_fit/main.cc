// lockstep-bench-fit: `lockstep bench fit --backend shm|gloo|mpi [--np N,...]
// --out net.json` (docs/plan.md).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/fit.h"
#include "tools/bench_fit/fit.h"
#include "tools/common/cli_main.h"
#include "tools/plan/job.h"

namespace lockstep::bench_fit {
namespace {

using plan_tool::JobSpec;

struct Options {
  std::string backend = "shm";
  std::string np = "2";
  std::string sizes;  // default per backend
  double factor = 4;
  double seconds = 0.2;
  std::string out;
  std::string name;
  std::string buffers = "auto";      // hot | cold (worker.cc) | auto: cold for shm
  int busy_threads = 0;              // computing threads per rank beside the sweep
  std::string statistic = "median";  // of the iterations: median | mean
  std::vector<std::string> launcher_args;
  bool worker = false;
  bool quiet = false;
  std::string refit;  // a fit file whose points are fitted again, without measuring
};

std::vector<size_t> size_list(const std::string& text, double factor) {
  auto colon = text.find(':');
  size_t lo = parse_bytes(text.substr(0, colon), "--sizes");
  size_t hi = colon == std::string::npos ? lo : parse_bytes(text.substr(colon + 1), "--sizes");
  if (lo < 4 || hi < lo || factor <= 1)
    throw InvalidArgument("--sizes wants MIN:MAX with 4 <= MIN <= MAX, and --factor > 1");
  std::vector<size_t> out;
  for (double s = double(lo); s <= double(hi) * 1.0000001; s *= factor)
    out.push_back(std::max<size_t>(4, size_t(s) / 4 * 4));
  return out;
}

// `statistic`: "median" or "mean" of the iterations' times.
std::vector<plan::Sample> parse_samples(const std::string& log, const std::string& statistic) {
  std::vector<plan::Sample> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    auto brace = line.find('{');
    if (brace == std::string::npos) continue;
    auto j = nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (j.is_discarded() || !j.contains("seconds")) continue;
    out.push_back({j["transport"], j["np"], j["bytes"],
                   statistic == "mean" ? j["mean_seconds"] : j["seconds"]});
  }
  return out;
}

bool names_hosts(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "-H" || a == "--hosts" || a == "--hostfile") return true;
  return false;
}

std::vector<plan::Sample> run_sweeps(const Options& o, const std::string& sizes) {
  std::vector<plan::Sample> all;
  std::vector<int> nps;
  if (names_hosts(o.launcher_args))
    nps.push_back(0);  // the hosts decide
  else
    for (size_t s = 0; s <= o.np.size();) {
      size_t c = o.np.find(',', s);
      nps.push_back(std::stoi(o.np.substr(s, c == std::string::npos ? c : c - s)));
      if (c == std::string::npos) break;
      s = c + 1;
    }
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (int np : nps) {
    JobSpec job;
    job.argv = {executable_dir() + "/lockstep", "run"};
    if (np > 0) job.argv.insert(job.argv.end(), {"-np", std::to_string(np)});
    job.argv.insert(job.argv.end(), o.launcher_args.begin(), o.launcher_args.end());
    // Flat collectives: the hierarchical allreduce is composed from these
    // fits by the planner, not fitted on its own.
    job.argv.insert(job.argv.end(), {"--backend", o.backend, "-x", "LOCKSTEP_HIERARCHICAL=0", "--",
                                     executable_dir() + "/lockstep-bench-fit", "--worker",
                                     "--sizes", sizes, "--factor", fmt::format("{}", o.factor),
                                     "--seconds", fmt::format("{}", o.seconds), "--buffers",
                                     o.buffers, "--busy-threads", std::to_string(o.busy_threads)});
    job.log_path = fmt::format("{}/lockstep-fit-{}-{}-{}.log", dir, o.backend, np, getpid());
    job.timeout_s = 600;
    job.label =
        fmt::format("fit sweep ({} np {})", o.backend, np > 0 ? std::to_string(np) : "hosts");
    if (!o.quiet) fmt::print(stderr, "lockstep bench fit: {}\n", plan_tool::shell_join(job.argv));
    auto r = plan_tool::run_job(job);
    auto samples = parse_samples(job.log_path, o.statistic);
    if (r.exit_code != 0 || samples.empty())
      throw Error(fmt::format("the {} sweep failed (exit {}); last lines of {}:\n{}", o.backend,
                              r.exit_code, job.log_path, plan_tool::tail_of(job.log_path)));
    std::filesystem::remove(job.log_path);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  return all;
}

// Shared memory moves gradients through the memory system, so whether they
// are cached decides its speed; across a network the wire does.
std::string buffers_for(const Options& o) {
  if (o.buffers != "auto") return o.buffers;
  return o.backend == "shm" ? "cold" : "hot";
}

void print_line(const std::string& what, const plan::AlphaBeta& ab, const plan::FitQuality& q) {
  fmt::print(
      "# {}: alpha {:.2f} us, beta {:.4g} s/B ({:.3f} GB/s), rms residual {:.1f}%, max "
      "{:.1f}% over {} points\n",
      what, ab.alpha_s * 1e6, ab.beta_s_per_byte, 1e-9 / std::max(ab.beta_s_per_byte, 1e-30),
      100 * q.rms_rel_error, 100 * q.max_rel_error, q.points);
}

// The line over every size, then the bands the model uses instead, if any.
void print_fit(const std::string& t, const std::string& a, const plan::AlgorithmModel& m) {
  print_line(fmt::format("{} {}{}", t, a, m.bands.empty() ? "" : ", one line (not used)"), m.cost,
             m.fit);
  for (size_t i = 0; i < m.bands.size(); ++i)
    print_line(fmt::format("{} {} band {} ({}..{} B)", t, a, i + 1, m.bands[i].min_bytes,
                           m.bands[i].max_bytes),
               m.bands[i].cost, m.bands[i].fit);
}

void fit_print_save(const std::vector<plan::Sample>& samples, const plan::HostModel& host,
                    const plan::NetworkModel& shape, const Options& o) {
  plan::NetworkModel m = plan::fit_network(samples, host, shape);
  fmt::print("# lockstep bench fit {}: residuals (fitted vs measured)\n",
             o.refit.empty() ? "--backend " + o.backend : "--refit " + o.refit);
  fmt::print("{:>6} {:>18} {:>4} {:>10} {:>14} {:>14} {:>9}\n", "trans.", "algorithm", "np",
             "bytes", "measured(us)", "fitted(us)", "resid.");
  for (const auto& p : m.points)
    fmt::print("{:>6} {:>18} {:>4} {:>10} {:>14.2f} {:>14.2f} {:>8.1f}%\n", p.transport,
               p.algorithm, p.np, p.bytes, p.measured_s * 1e6, p.fitted_s * 1e6,
               100 * (p.fitted_s - p.measured_s) / p.measured_s);
  for (const auto& [t, algos] : m.transports)
    for (const auto& [a, model] : algos) print_fit(t, a, model);
  plan::save_network(o.out, m);
  fmt::print("# wrote {}\n", o.out);
}

// --refit: the stored points fitted again (a fit from before size bands, or
// to compare fits on the same measurements).
int refit(const Options& o) {
  plan::NetworkModel old = plan::load_network(o.refit);
  if (old.points.empty() || !old.host)
    throw InvalidArgument(
        fmt::format("--refit {}: no measured points or host section (write it "
                    "with `lockstep bench fit`)",
                    o.refit));
  std::vector<plan::Sample> samples;
  for (const auto& p : old.points) samples.push_back({p.transport, p.np, p.bytes, p.measured_s});
  plan::NetworkModel shape = old;
  shape.transports.clear();
  shape.points.clear();
  shape.description += fmt::format("; refitted from {}", o.refit);
  fit_print_save(samples, *old.host, shape, o);
  return 0;
}

int drive(Options o) {
  if (!o.refit.empty()) {
    if (o.out.empty()) throw InvalidArgument("--out FILE is required");
    return refit(o);
  }
  if (o.backend != "shm" && o.backend != "gloo" && o.backend != "mpi")
    throw InvalidArgument(fmt::format("--backend {}: use shm, gloo or mpi", o.backend));
  if (o.out.empty()) throw InvalidArgument("--out FILE is required");
  if (o.buffers != "hot" && o.buffers != "cold" && o.buffers != "auto")
    throw InvalidArgument(fmt::format("--buffers {}: use auto, hot or cold", o.buffers));
  if (o.busy_threads < 0) throw InvalidArgument("--busy-threads must be >= 0");
  if (o.statistic != "median" && o.statistic != "mean")
    throw InvalidArgument(fmt::format("--statistic {}: use median or mean", o.statistic));
  // Networks shaped to a few hundred Mbit/s make 16 MiB cost seconds.
  const std::string sizes = !o.sizes.empty()     ? o.sizes
                            : o.backend == "shm" ? "4B:16MiB"
                                                 : "4B:4MiB";
  o.buffers = buffers_for(o);
  plan::HostModel host = measure_host(true, o.buffers == "cold");
  std::vector<plan::Sample> samples = run_sweeps(o, sizes);
  for (auto& s : samples)
    if (s.transport.rfind("hierarchical-", 0) == 0)
      throw Error(fmt::format("the sweep ran {} although LOCKSTEP_HIERARCHICAL=0", s.transport));
  plan::NetworkModel shape;
  shape.name = !o.name.empty() ? o.name
                               : fmt::format("fit: {} on {}", o.backend,
                                             knob_string("LOCKSTEP_HOST").empty()
                                                 ? "this host"
                                                 : knob_string("LOCKSTEP_HOST"));
  shape.description = fmt::format(
      "lockstep bench fit --backend {} --buffers {} --busy-threads {} --statistic {} "
      "({} sizes {})",
      o.backend, o.buffers, o.busy_threads, o.statistic, samples.size(), sizes);
  shape.shm_small_bytes = static_cast<int64_t>(
      parse_bytes(knob_string("LOCKSTEP_SHM_SMALL_BYTES"), "LOCKSTEP_SHM_SMALL_BYTES"));
  shape.shm_slot_bytes = static_cast<int64_t>(
      parse_bytes(knob_string("LOCKSTEP_SHM_SLOT_BYTES"), "LOCKSTEP_SHM_SLOT_BYTES"));
  fit_print_save(samples, host, shape, o);
  return 0;
}

}  // namespace
}  // namespace lockstep::bench_fit

int main(int argc, char** argv) {
  using namespace lockstep::bench_fit;
  CLI::App app{
      "Fit the planner's alpha-beta-gamma network model from measured allreduces "
      "(docs/plan.md)",
      "lockstep bench fit"};
  Options o;
  app.add_option("--backend", o.backend, "shm | gloo | mpi")->capture_default_str();
  app.add_option("-n,--np", o.np, "world sizes to sweep, e.g. 2 or 2,3")->capture_default_str();
  app.add_option("--sizes", o.sizes, "MIN:MAX bytes (default 4B:16MiB for shm, 4B:4MiB else)");
  app.add_option("-f,--factor", o.factor, "size multiplier between steps")->capture_default_str();
  app.add_option("--seconds", o.seconds, "timed seconds per size")->capture_default_str();
  app.add_option("-o,--out", o.out, "network model file to write");
  app.add_option("--name", o.name, "name of the model (default: 'fit: BACKEND on HOST')");
  app.add_option("--launcher-arg", o.launcher_args,
                 "extra `lockstep run` argument (repeat), e.g. --launcher-arg=-H "
                 "--launcher-arg=nsA:1,nsB:1");
  app.add_option("--buffers", o.buffers,
                 "hot: time one buffer back to back (cache-resident); "
                 "cold: rewrite and evict it before every timed allreduce, as training's "
                 "gradients are; auto: cold for shm, hot across a network")
      ->capture_default_str();
  app.add_option("--busy-threads", o.busy_threads,
                 "computing threads per rank beside the "
                 "sweep, as training's intra-op threads (for ranks that share cores)")
      ->capture_default_str();
  app.add_option("--statistic", o.statistic,
                 "what each size's point is: the median of the "
                 "iterations, or the mean (what a step of many collectives pays when some wait "
                 "long)")
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "do not echo the commands run");
  app.add_option("--refit", o.refit,
                 "fit the points stored in this fit file again, without "
                 "measuring (same host section; --backend only names the table)");
  app.add_flag("--worker", o.worker, "(internal) measure under lockstep run");
  lockstep::plan_tool::accept_np_flag(argc, argv);
  return lockstep::cli::run_command(app, argc, argv, "lockstep bench fit", [&] {
    if (o.worker)
      return worker_main(size_list(o.sizes, o.factor), o.seconds, o.buffers == "cold",
                         o.busy_threads);
    return drive(o);
  });
}
