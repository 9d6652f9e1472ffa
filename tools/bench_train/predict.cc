#include "tools/bench_train/predict.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "lockstep/base/executable.h"
#include "tools/plan/job.h"
#include "tools/plan/layouts_format.h"

namespace lockstep::bench_train {
namespace {

// One worker's step in ms at `samples_per_s` of `processes` processes.
double step_ms(const Measured& m, double samples_per_s, int processes = 1) {
  return 1e3 * double(m.batch_size) * processes / samples_per_s;
}

// Runs a shell command with its output in `log`; prints the log's tail and
// returns false when it fails.
bool run_logged(const std::string& command, const std::string& log, const std::string& what) {
  const int rc = std::system(fmt::format("{} >'{}' 2>&1", command, log).c_str());
  if (rc == 0) {
    std::filesystem::remove(log);
    return true;
  }
  fmt::print(stderr, "bench train: {} failed (status {}); no prediction. Its last lines:\n{}\n",
             what, rc, plan_tool::tail_of(log));
  return false;
}

// The profile's compute set to the rounds' median of lockstep 1x1 (the same
// worker at the same thread count), so that the machine's load during the
// separate profiling run does not shift every prediction.
plan::Profile normalised(const plan::Profile& p, const Measured& m) {
  const double recorded = plan::summarize(p).compute_ms;
  if (m.lockstep_1x1 <= 0 || recorded <= 0) return p;
  return plan::scale_profile(p, step_ms(m, m.lockstep_1x1) / recorded);
}

plan::LayoutQuery query_for(const Measured& m) {
  plan::LayoutQuery q;
  q.host_cpus = m.cpus;
  q.scaling = fit_scaling(m);
  return q;
}

// The planner's first among the measured layouts, and the measured fastest.
struct Verdict {
  plan::Layout predicted_best, measured_best;
  double predicted = 0, measured = 0;
};

// The prediction of each measured layout that the model covers, with
// ratio_to_best against the best of them.
std::vector<std::pair<plan::LayoutPrediction, double>> predict_measured(
    const Measured& m, const plan::Profile& profile, const plan::NetworkModel& network,
    const plan::LayoutQuery& q) {
  std::vector<std::pair<plan::LayoutPrediction, double>> out;
  double best = 0;
  for (const auto& [layout, measured] : m.layouts) {
    if (layout.workers * layout.threads > m.cpus) {
      fmt::print("{:<8} {:>12.0f}  oversubscribed: not modelled\n", layout.name(), measured);
      continue;
    }
    out.emplace_back(plan::predict_layout(profile, network, q, layout), measured);
    best = std::max(best, out.back().first.step.samples_per_s);
  }
  for (auto& [p, measured] : out) p.ratio_to_best = best > 0 ? p.step.samples_per_s / best : 0;
  return out;
}

Verdict print_side_by_side(const Measured& m, const plan::Profile& profile,
                           const plan::NetworkModel& network, const plan::LayoutQuery& q,
                           FILE* json) {
  fmt::print("{:<8} {:>12} {:>12} {:>10} {:>14} {:>8}\n", "layout", "measured/s", "predicted/s",
             "pred/meas", "pred. step ms", "overlap");
  Verdict v;
  for (const auto& [p, measured] : predict_measured(m, profile, network, q)) {
    const double predicted = p.step.samples_per_s;
    const double ratio = measured > 0 ? predicted / measured : 0;
    fmt::print("{:<8} {:>12.0f} {:>12.0f} {:>10.3f} {:>14.2f} {:>8}\n", p.layout.name(), measured,
               predicted, ratio, p.step.step_ms, p.step.overlap ? "on" : "off");
    nlohmann::json j = plan_tool::layout_json(p, q.scaling, false);
    j["kind"] = "bench-train-prediction";
    j["measured_samples_per_s"] = measured;
    j["predicted_over_measured"] = ratio;
    std::printf("%s\n", j.dump().c_str());
    if (json) std::fprintf(json, "%s\n", j.dump().c_str());
    if (predicted > v.predicted) v.predicted = predicted, v.predicted_best = p.layout;
    if (measured > v.measured) v.measured = measured, v.measured_best = p.layout;
  }
  return v;
}

void print_recommendation(const Measured& m, const std::vector<plan::LayoutPrediction>& ranked,
                          const Verdict& v, FILE* json) {
  const plan::LayoutPrediction& rec = ranked.front();
  const bool measured = std::any_of(m.layouts.begin(), m.layouts.end(),
                                    [&](const auto& l) { return l.first == rec.layout; });
  const bool agree = rec.layout == v.measured_best;
  fmt::print(
      "planner recommends {} ({:.0f} samples/s predicted; first of the {} placement layouts "
      "of {} CPUs); measured fastest: {} ({:.0f} samples/s): {}\n",
      rec.layout.name(), rec.step.samples_per_s, ranked.size(), m.cpus, v.measured_best.name(),
      v.measured,
      agree      ? "the same layout"
      : measured ? "a different layout"
                 : "not measured");
  if (!measured)
    fmt::print(
        "  among the measured layouts the planner ranks {} first: {}\n", v.predicted_best.name(),
        v.predicted_best == v.measured_best ? "the measured fastest" : "not the measured fastest");
  nlohmann::json j = {{"kind", "bench-train-recommendation"},
                      {"recommended", rec.layout.name()},
                      {"recommended_measured", measured},
                      {"predicted_best_measured", v.predicted_best.name()},
                      {"measured_fastest", v.measured_best.name()},
                      {"agree", agree}};
  std::printf("%s\n", j.dump().c_str());
  if (json) std::fprintf(json, "%s\n", j.dump().c_str());
}

}  // namespace

plan::ThreadScaling fit_scaling(const Measured& m) {
  plan::ThreadScaling s;
  std::string threads = "default serial fraction (plain 1x1 or 1xC not measured)";
  std::string workers = "no contention (ceiling Cx1 not measured)";
  if (m.cpus > 1 && m.plain_1x1 > 0 && m.plain_1xc > 0) {
    s.serial_fraction =
        plan::fit_serial_fraction(step_ms(m, m.plain_1x1), 1, step_ms(m, m.plain_1xc), m.cpus);
    threads = fmt::format("serial fraction from plain 1x1 and 1x{} tuned", m.cpus);
  }
  if (m.cpus > 1 && m.plain_1x1 > 0 && m.ceiling_cx1 > 0) {
    s.contention =
        plan::fit_contention(step_ms(m, m.plain_1x1), step_ms(m, m.ceiling_cx1, m.cpus), m.cpus);
    workers = fmt::format("contention from ceiling {}x1 against plain 1x1 tuned", m.cpus);
  }
  s.source = threads + "; " + workers;
  return s;
}

std::optional<plan::Profile> record_profile(const std::string& command, const std::string& path) {
  std::filesystem::remove(path);
  if (!run_logged(command, path + ".log", "recording the profile (lockstep 1x1)"))
    return std::nullopt;
  try {
    return plan::load_profile(path);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench train: no profile, so no prediction: {}\n", e.what());
    return std::nullopt;
  }
}

std::optional<plan::NetworkModel> shm_network(const std::string& network_file,
                                              const std::vector<int>& worker_counts,
                                              const std::string& path) {
  std::string nps;
  for (int n : worker_counts)
    if (n > 1) nps += (nps.empty() ? "" : ",") + std::to_string(n);
  std::string file = network_file;
  if (file.empty() && !nps.empty()) {
    // Short: the prediction needs the costs of FashionCnn's allreduces
    // (0.88 MB of gradients in at most a few fused batches), not a full sweep.
    const std::string cmd = fmt::format(
        "'{}/lockstep' bench fit --backend shm --np {} --sizes 4:4MiB --seconds 0.05 --quiet "
        "--out '{}'",
        executable_dir(), nps, path);
    fmt::print(stderr, "bench train: fitting shm costs for the planner: {}\n", cmd);
    if (!run_logged(cmd, path + ".log", "lockstep bench fit")) return std::nullopt;
    file = path;
  }
  try {
    if (file.empty()) {  // one worker: no communication to cost
      plan::NetworkModel none;
      none.name = "none (one worker)";
      return none;
    }
    return plan::resolve_network({file});
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench train: no network model, so no prediction: {}\n", e.what());
    return std::nullopt;
  }
}

void print_predictions(const Measured& m, const plan::Profile& recorded,
                       const plan::NetworkModel& network, FILE* json) {
  const plan::Profile profile = normalised(recorded, m);
  const plan::LayoutQuery q = query_for(m);
  fmt::print(
      "\nplanner (plan::rank_layouts): {:.2f} ms compute at 1x1 (profile recorded at {:.2f} "
      "ms, set to the rounds' lockstep 1x1); {}; shm costs: {}\n",
      plan::summarize(profile).compute_ms, plan::summarize(recorded).compute_ms,
      plan_tool::describe_scaling(q.scaling), network.name);
  const Verdict v = print_side_by_side(m, profile, network, q, json);
  if (v.measured <= 0) return;
  print_recommendation(m, plan::rank_layouts(profile, network, q), v, json);
}

}  // namespace lockstep::bench_train
