#include "lockstep/plan/layouts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/policy/policies.h"

namespace lockstep::plan {

using policy::worker_cpus;
namespace {

void check_scaling(const ThreadScaling& s) {
  if (!(s.serial_fraction >= 0) || !std::isfinite(s.serial_fraction))
    throw InvalidArgument(fmt::format("serial fraction {} must be >= 0", s.serial_fraction));
  if (!(s.contention >= 0) || !std::isfinite(s.contention))
    throw InvalidArgument(fmt::format("contention {} must be >= 0 per extra worker", s.contention));
}

double contention_factor(double contention, int workers) { return 1 + contention * (workers - 1); }

// The scenario of one layout on one node of `host_cpus` cores: the overlap
// rule and the CPU sharing follow from cores and threads in simulate().
Scenario layout_scenario(const LayoutQuery& q, Layout layout) {
  Scenario s = q.scenario;
  s.topology.nodes = 1;
  s.topology.ranks_per_node = layout.workers;
  s.cores_per_node = q.host_cpus;
  s.threads_per_rank = layout.threads;
  s.colocated_slowdown = 1;  // K(N) is in compute_scale
  s.nodes_share_machine = false;
  return s;
}

void check_layout(const LayoutQuery& q, const NetworkModel& network, Layout layout) {
  if (q.host_cpus < 1) throw InvalidArgument(fmt::format("host CPUs {} must be >= 1", q.host_cpus));
  if (layout.workers < 1 || layout.threads < 1)
    throw InvalidArgument(
        fmt::format("layout {}: workers and threads must be >= 1", layout.name()));
  if (layout.workers * layout.threads > q.host_cpus)
    throw InvalidArgument(fmt::format(
        "layout {} needs {} CPUs but the host has {}: oversubscribed layouts are not modelled",
        layout.name(), layout.workers * layout.threads, q.host_cpus));
  if (layout.workers > 1 && !network.has("shm"))
    throw InvalidArgument(fmt::format(
        "network '{}' has no shm costs for layout {}: fit them with `lockstep bench fit "
        "--backend shm`",
        network.name, layout.name()));
}

}  // namespace

double amdahl_time(double serial_fraction, int threads) {
  if (threads < 1) throw InvalidArgument(fmt::format("threads {} must be >= 1", threads));
  return serial_fraction + (1 - serial_fraction) / threads;
}

double fit_serial_fraction(double ms_a, int threads_a, double ms_b, int threads_b) {
  if (!(ms_a > 0) || !(ms_b > 0) || threads_a < 1 || threads_b < 1 || threads_a == threads_b)
    throw InvalidArgument(fmt::format(
        "fitting the serial fraction needs positive times at two different thread counts "
        "(got {} ms at {}, {} ms at {})",
        ms_a, threads_a, ms_b, threads_b));
  if (threads_a > threads_b) std::swap(ms_a, ms_b), std::swap(threads_a, threads_b);
  const double r = ms_a / ms_b;                      // the speed-up from threads_a to threads_b
  if (r >= double(threads_b) / threads_a) return 0;  // linear or better
  // r = A(a) / A(b); multiplied out, s + (1 - s)/a = r s + r (1 - s)/b is
  // linear in s. As s grows, r falls towards (1 - 1/a) / (1 - 1/b): no s
  // fits a slow-down beyond that (none at all from a = 1).
  const double ia = 1.0 / threads_a, ib = 1.0 / threads_b;
  const double s = (r * ib - ia) / (1 - ia - r + r * ib);
  if (!std::isfinite(s) || s < 0)
    throw InvalidArgument(fmt::format(
        "no serial fraction fits {} ms at {} threads and {} ms at {}: the step slowed down "
        "{:.2f}x, more than the model reaches ({:.2f}x)",
        ms_a, threads_a, ms_b, threads_b, 1 / r, (1 - ib) / (1 - ia)));
  return s;
}

double fit_contention(double alone_ms, double colocated_ms, int workers) {
  if (!(alone_ms > 0) || !(colocated_ms > 0) || workers < 2)
    throw InvalidArgument(fmt::format(
        "fitting contention needs positive step times alone and beside others, at >= 2 workers "
        "(got {} ms alone, {} ms at {})",
        alone_ms, colocated_ms, workers));
  return std::max(0.0, (colocated_ms / alone_ms - 1) / (workers - 1));
}

std::string Layout::name() const { return fmt::format("{}x{}", workers, threads); }

std::vector<Layout> placement_layouts(int host_cpus) {
  if (host_cpus < 1) throw InvalidArgument(fmt::format("host CPUs {} must be >= 1", host_cpus));
  std::vector<Layout> out;
  for (int n = 1; n <= host_cpus; ++n) out.push_back({n, worker_cpus(host_cpus, n)});
  return out;
}

std::vector<Layout> parse_layouts(std::string_view text, std::string_view what) {
  std::vector<Layout> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    Layout l;
    char x = 0, rest = 0;
    if (std::sscanf(item.c_str(), "%d%c%d%c", &l.workers, &x, &l.threads, &rest) != 3 || x != 'x' ||
        l.workers < 1 || l.threads < 1)
      throw InvalidArgument(
          fmt::format("{} '{}': '{}' is not WORKERSxTHREADS (e.g. 2x8)", what, text, item));
    out.push_back(l);
    start = comma + 1;
  }
  return out;
}

Profile scale_profile(Profile profile, double factor) {
  if (!(factor > 0) || !std::isfinite(factor))
    throw InvalidArgument(fmt::format("profile scale {} must be a positive factor", factor));
  for (auto& s : profile.steps) {
    s.step_ms *= factor;
    s.forward_ms *= factor;
    s.backward_ms *= factor;
    s.sync_ms *= factor;
    s.optimizer_ms *= factor;
  }
  for (auto& g : profile.gradients) g.ready_ms *= factor;
  return profile;
}

double compute_scale(const ThreadScaling& scaling, const Profile& profile, Layout layout) {
  check_scaling(scaling);
  const int t0 = std::max(1, profile.intra_op_threads);
  const int n0 = std::max(1, profile.local_size);
  const double threads = amdahl_time(scaling.serial_fraction, layout.threads) /
                         amdahl_time(scaling.serial_fraction, t0);
  const double workers = contention_factor(scaling.contention, layout.workers) /
                         contention_factor(scaling.contention, n0);
  return threads * workers;
}

LayoutPrediction predict_layout(const Profile& profile, const NetworkModel& network,
                                const LayoutQuery& query, Layout layout) {
  check_layout(query, network, layout);
  LayoutPrediction out;
  out.layout = layout;
  out.compute_scale = compute_scale(query.scaling, profile, layout);
  out.step =
      simulate(scale_profile(profile, out.compute_scale), network, layout_scenario(query, layout));
  return out;
}

std::vector<LayoutPrediction> rank_layouts(const Profile& profile, const NetworkModel& network,
                                           const LayoutQuery& query) {
  const std::vector<Layout> layouts =
      query.layouts.empty() ? placement_layouts(query.host_cpus) : query.layouts;
  std::vector<LayoutPrediction> out;
  for (Layout l : layouts) out.push_back(predict_layout(profile, network, query, l));
  std::stable_sort(out.begin(), out.end(),
                   [](const LayoutPrediction& a, const LayoutPrediction& b) {
                     if (a.step.samples_per_s != b.step.samples_per_s)
                       return a.step.samples_per_s > b.step.samples_per_s;
                     return a.layout.workers < b.layout.workers;
                   });
  const double best = out.empty() ? 0 : out.front().step.samples_per_s;
  for (auto& p : out) p.ratio_to_best = best > 0 ? p.step.samples_per_s / best : 0;
  return out;
}

}  // namespace lockstep::plan
