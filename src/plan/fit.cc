#include "lockstep/plan/fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/cost.h"

namespace lockstep::plan {
namespace {

// Weighted least squares for y ~ p x1 + q x2, weights 1 / y^2; a negative
// coefficient is dropped (refitted as 0), since neither a latency nor a
// per-byte cost can be negative.
std::pair<double, double> solve2(const std::vector<std::array<double, 3>>& rows) {
  double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
  for (const auto& [x1, x2, y] : rows) {
    double w = 1.0 / (y * y);
    s11 += w * x1 * x1;
    s12 += w * x1 * x2;
    s22 += w * x2 * x2;
    t1 += w * x1 * y;
    t2 += w * x2 * y;
  }
  auto only1 = [&] { return std::make_pair(s11 > 0 ? std::max(0.0, t1 / s11) : 0.0, 0.0); };
  auto only2 = [&] { return std::make_pair(0.0, s22 > 0 ? std::max(0.0, t2 / s22) : 0.0); };
  double det = s11 * s22 - s12 * s12;
  if (std::fabs(det) < 1e-300 * std::max(1.0, s11 * s22)) return s11 > 0 ? only1() : only2();
  double p = (t1 * s22 - t2 * s12) / det;
  double q = (s11 * t2 - s12 * t1) / det;
  if (p < 0) return only2();
  if (q < 0) return only1();
  return {p, q};
}

}  // namespace

LineFit fit_line(const std::vector<std::pair<double, double>>& xy) {
  if (xy.size() < 2) throw InvalidArgument("a line fit needs at least 2 points");
  std::vector<std::array<double, 3>> rows;
  for (auto [x, y] : xy) {
    if (!(y > 0)) throw InvalidArgument(fmt::format("fit: non-positive time {} at x={}", y, x));
    rows.push_back({1.0, x, y});
  }
  auto [c, k] = solve2(rows);
  LineFit f{c, k, 0, 0};
  double sq = 0;
  for (auto [x, y] : xy) {
    double rel = (c + k * x - y) / y;
    sq += rel * rel;
    f.max_rel_error = std::max(f.max_rel_error, std::fabs(rel));
  }
  f.rms_rel_error = std::sqrt(sq / xy.size());
  return f;
}

NetworkModel fit_network(const std::vector<Sample>& samples, const HostModel& host,
                         NetworkModel model) {
  model.host = host;
  struct Row {
    const Sample* s;
    Coefficients k;
  };
  std::map<std::pair<std::string, std::string>, std::vector<Row>> groups;
  for (const auto& s : samples) {
    if (s.np < 2) continue;  // one rank communicates nothing
    std::string algo = algorithm_for(model, s.transport, s.np, double(s.bytes));
    groups[{s.transport, algo}].push_back(
        {&s, coefficients(model, s.transport, algo, s.np, double(s.bytes))});
  }
  if (groups.empty()) throw InvalidArgument("fit: no samples with 2 or more ranks");
  for (auto& [key, rows] : groups) {
    const auto& [transport, algo] = key;
    if (rows.size() < 2)
      throw InvalidArgument(fmt::format(
          "fit: {} {} has {} sample(s); it needs 2 or more sizes in its range", transport, algo,
          rows.size()));
    std::vector<std::array<double, 3>> eq;
    for (const auto& r : rows) {
      // Subtract the reduction, known from the kernel benchmark; keep the
      // remainder positive so the relative weights stay defined.
      double y = std::max(r.s->seconds - r.k.reduced * host.gamma_s_per_byte, 0.05 * r.s->seconds);
      eq.push_back({r.k.steps, r.k.bytes, y});
    }
    auto [alpha, beta] = solve2(eq);
    AlgorithmModel a;
    a.cost = {alpha, beta};
    double sq = 0;
    for (const auto& r : rows) {
      Cost c = apply(r.k, a.cost, host.gamma_s_per_byte);
      double rel = (c.total() - r.s->seconds) / r.s->seconds;
      sq += rel * rel;
      a.fit.max_rel_error = std::max(a.fit.max_rel_error, std::fabs(rel));
      model.points.push_back({transport, algo, r.s->np, r.s->bytes, r.s->seconds, c.total()});
    }
    a.fit.points = static_cast<int>(rows.size());
    a.fit.rms_rel_error = std::sqrt(sq / rows.size());
    model.transports[transport][algo] = a;
  }
  return model;
}

}  // namespace lockstep::plan
