// `lockstep plan validate`: the report, a table or one JSON line per point
// (validate.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/plan/stats.h"
#include "tools/plan/commands.h"
#include "tools/plan/job.h"
#include "tools/plan/validate.h"

namespace lockstep::plan_tool::validate {
namespace {

using plan::detail::median;

std::string note_of(const PointResult& res) {
  if (res.oversubscribed) return "OVERSUBSCRIBED (more ranks than cores: measures the scheduler)";
  if (res.comm_without_core)
    return "NO CORE FOR COMMUNICATION (hosts share this machine's cores and overlap is on: "
           "measures the scheduler; LOCKSTEP_OVERLAP=off validates the network)";
  return "";
}

}  // namespace

void Validator::report() const {
  for (size_t i = 0; i < points_.size(); ++i) {
    const PointResult& res = results_[i];
    const plan::RoundErrors e = res.measured_ms.empty()
                                    ? plan::RoundErrors{}
                                    : plan::round_errors(res.measured_ms, res.predicted_ms);
    o_.json ? report_json(i, e) : report_row(i, e);
  }
  if (!o_.json) report_rounds();
}

void Validator::report_json(size_t i, const plan::RoundErrors& e) const {
  const plan::ValidationPoint& p = points_[i];
  const PointResult& res = results_[i];
  fmt::print("{}\n", nlohmann::json{{"np", p.np},
                                    {"hosts", p.hosts},
                                    {"network", p.network},
                                    {"backend", res.backend},
                                    {"overlap", res.overlap},
                                    {"rounds", res.measured_ms.size()},
                                    {"measured_step_ms", e.median_measured_ms},
                                    {"predicted_step_ms", e.median_predicted_ms},
                                    {"error_pct", e.median_error_pct},
                                    {"error_rounds_pct", e.error_pct},
                                    {"error_min_pct", e.min_error_pct},
                                    {"error_max_pct", e.max_error_pct},
                                    {"rounds_within_10pct", e.rounds_within(10)},
                                    {"measured_rounds_ms", res.measured_ms},
                                    {"predicted_rounds_ms", res.predicted_ms},
                                    {"measured_sync_ms", median(res.measured_sync_ms)},
                                    {"predicted_comm_ms", median(res.predicted_comm_ms)},
                                    {"compute_slowdown", median(res.slowdown)},
                                    {"compute_slowdown_rounds", res.slowdown},
                                    {"wake_wait_ms", res.wake_wait_ms},
                                    {"oversubscribed", res.oversubscribed},
                                    {"comm_without_core", res.comm_without_core}}
                         .dump());
}

void Validator::report_row(size_t i, const plan::RoundErrors& e) const {
  const plan::ValidationPoint& p = points_[i];
  const PointResult& res = results_[i];
  if (i == 0) {
    fmt::print(
        "# lockstep plan validate: {} ({} cores, {} intra-op thread(s) per rank, {} "
        "round(s); each round predicted from its own np 1 profile; error = median "
        "of the rounds' errors)\n",
        shell_join(o_.program), cores(), o_.threads, o_.rounds);
    fmt::print(
        "{:>4} {:>6} {:>16} {:>8} {:>8} {:>13} {:>14} {:>8} {:>17} {:>8} {:>11} "
        "{:>11} {:>9} {:>7}  {}\n",
        "np", "hosts", "network", "backend", "overlap", "measured(ms)", "predicted(ms)", "error",
        "range", "in 10%", "sync meas.", "comm pred.", "compute x", "W(ms)", "note");
  }
  fmt::print(
      "{:>4} {:>6} {:>16} {:>8} {:>8} {:>13.2f} {:>14.2f} {:>+7.1f}% {:>17} {:>8} "
      "{:>11.2f} {:>11.2f} {:>9.3f} {:>7.2f}  {}\n",
      p.np, p.hosts, p.network, res.backend, res.overlap ? "on" : "off", e.median_measured_ms,
      e.median_predicted_ms, e.median_error_pct,
      fmt::format("{:+.1f}..{:+.1f}%", e.min_error_pct, e.max_error_pct),
      fmt::format("{}/{}", e.rounds_within(10), e.error_pct.size()), median(res.measured_sync_ms),
      median(res.predicted_comm_ms), median(res.slowdown), res.wake_wait_ms, note_of(res));
}

void Validator::report_rounds() const {
  fmt::print("# per round: measured / predicted (ms), error\n");
  for (size_t i = 0; i < points_.size(); ++i) {
    const PointResult& res = results_[i];
    std::string rounds;
    for (size_t k = 0; k < res.measured_ms.size(); ++k)
      rounds += fmt::format("  r{} {:.2f}/{:.2f} {:+.1f}%", k + 1, res.measured_ms[k],
                            res.predicted_ms[k],
                            100 * (res.predicted_ms[k] - res.measured_ms[k]) / res.measured_ms[k]);
    fmt::print("# np {} {}:{}\n", points_[i].np, points_[i].network, rounds);
  }
  fmt::print("# files: {}\n", dir_);
}

}  // namespace lockstep::plan_tool::validate
