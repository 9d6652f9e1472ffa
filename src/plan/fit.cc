#include "lockstep/plan/fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>

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

namespace {

struct Row {
  const Sample* s;
  Coefficients k;
};

// One alpha-beta line fitted on rows[begin, end), and its residuals.
struct Line {
  AlphaBeta cost;
  FitQuality fit;
  double abs_sum = 0;  // sum of |relative residual|
};

// The time of a row without its reduction, known from the kernel benchmark,
// kept positive so the relative weights stay defined.
double transfer_s(const Row& r, double gamma) {
  return std::max(r.s->seconds - r.k.reduced * gamma, 0.05 * r.s->seconds);
}

Line residuals(const std::vector<Row>& rows, size_t begin, size_t end, double gamma,
               AlphaBeta cost) {
  Line l;
  l.cost = cost;
  double sq = 0;
  for (size_t i = begin; i < end; ++i) {
    double rel = (apply(rows[i].k, cost, gamma).total() - rows[i].s->seconds) / rows[i].s->seconds;
    sq += rel * rel;
    l.abs_sum += std::fabs(rel);
    l.fit.max_rel_error = std::max(l.fit.max_rel_error, std::fabs(rel));
  }
  l.fit.points = static_cast<int>(end - begin);
  l.fit.rms_rel_error = std::sqrt(sq / (end - begin));
  return l;
}

// Least squares on the relative error: the line over all sizes.
Line fit_least_squares(const std::vector<Row>& rows, double gamma) {
  std::vector<std::array<double, 3>> eq;
  for (const Row& r : rows) eq.push_back({r.k.steps, r.k.bytes, transfer_s(r, gamma)});
  auto [alpha, beta] = solve2(eq);
  return residuals(rows, 0, rows.size(), gamma, {alpha, beta});
}

// Least absolute relative deviation over rows[begin, end), alpha, beta >= 0.
// Its optimum lies on a vertex: a line through two rows, or through one row
// with the other coefficient 0, so all of them are tried (bands hold tens of
// rows at most). Unlike squares, one erratic median (a 4 ms wake-up among
// 0.3 ms points) cannot drag the line off the others.
Line fit_least_deviation(const std::vector<Row>& rows, size_t begin, size_t end, double gamma) {
  std::vector<AlphaBeta> candidates;
  for (size_t i = begin; i < end; ++i) {
    const Row& p = rows[i];
    const double yp = transfer_s(p, gamma);
    if (p.k.steps > 0) candidates.push_back({yp / p.k.steps, 0});
    if (p.k.bytes > 0) candidates.push_back({0, yp / p.k.bytes});
    for (size_t j = i + 1; j < end; ++j) {
      const Row& q = rows[j];
      const double yq = transfer_s(q, gamma);
      double det = p.k.steps * q.k.bytes - q.k.steps * p.k.bytes;
      if (std::fabs(det) <= 1e-12 * std::fabs(p.k.steps * q.k.bytes)) continue;
      double alpha = (yp * q.k.bytes - yq * p.k.bytes) / det;
      double beta = (p.k.steps * yq - q.k.steps * yp) / det;
      if (alpha >= 0 && beta >= 0) candidates.push_back({alpha, beta});
    }
  }
  Line best;
  bool have = false;
  for (const AlphaBeta& c : candidates) {
    Line l = residuals(rows, begin, end, gamma, c);
    if (!have || l.abs_sum < best.abs_sum) best = l, have = true;
  }
  return best;
}

// One way of cutting the rows (sorted by bytes) into bands.
struct Split {
  std::vector<Line> bands;
  std::vector<size_t> cuts;  // row index where each band begins, then rows.size()
  double abs_sum = 0, max_rel = 0;
};

class Splitter {
 public:
  Splitter(const std::vector<Row>& rows, double gamma) : rows_(rows), gamma_(gamma) {
    for (size_t i = 0; i < rows.size(); ++i)
      if (i == 0 || rows[i].s->bytes != rows[i - 1].s->bytes) starts_.push_back(i);
    starts_.push_back(rows.size());
  }

  // The k bands of min_sizes distinct sizes or more with the least total
  // deviation; nullopt when there are too few sizes.
  std::optional<Split> best(int k, int min_sizes) {
    std::optional<Split> out;
    std::vector<size_t> firsts;
    search(k, min_sizes, 0, firsts, out);
    return out;
  }

 private:
  const Line& band(size_t g0, size_t g1) {
    auto it = memo_.find({g0, g1});
    if (it == memo_.end())
      it = memo_
               .emplace(std::make_pair(g0, g1),
                        fit_least_deviation(rows_, starts_[g0], starts_[g1], gamma_))
               .first;
    return it->second;
  }

  void search(int k, int min_sizes, size_t first, std::vector<size_t>& firsts,
              std::optional<Split>& out) {
    const size_t groups = starts_.size() - 1;
    firsts.push_back(first);
    if (k == 1) {
      if (groups - first >= size_t(min_sizes)) {
        Split s;
        firsts.push_back(groups);
        for (size_t i = 0; i + 1 < firsts.size(); ++i) {
          s.bands.push_back(band(firsts[i], firsts[i + 1]));
          s.abs_sum += s.bands.back().abs_sum;
          s.max_rel = std::max(s.max_rel, s.bands.back().fit.max_rel_error);
          s.cuts.push_back(starts_[firsts[i]]);
        }
        s.cuts.push_back(rows_.size());
        firsts.pop_back();
        if (!out || s.abs_sum < out->abs_sum) out = std::move(s);
      }
    } else {
      for (size_t next = first + min_sizes; next + size_t(min_sizes) * (k - 1) <= groups; ++next)
        search(k - 1, min_sizes, next, firsts, out);
    }
    firsts.pop_back();
  }

  const std::vector<Row>& rows_;
  double gamma_;
  std::vector<size_t> starts_;  // first row of each distinct size, then rows.size()
  std::map<std::pair<size_t, size_t>, Line> memo_;
};

// The bands `rule` picks for one algorithm's rows (sorted by bytes) whose
// least-squares line misses by more than rule.split_above.
Split choose_bands(const std::vector<Row>& rows, const BandRule& rule, double gamma) {
  Splitter splitter(rows, gamma);
  std::vector<std::optional<Split>> by_k(rule.max_bands + 1);
  for (int k = 1; k <= rule.max_bands; ++k) by_k[k] = splitter.best(k, k == 1 ? 1 : rule.min_sizes);
  int k = 1;
  while (by_k[k]->max_rel > rule.split_above) {
    int next = 0;
    for (int j = k + 1; j <= rule.max_bands && !next; ++j)
      if (by_k[j] && by_k[j]->abs_sum < rule.gain * by_k[k]->abs_sum) next = j;
    if (!next) break;
    k = next;
  }
  return std::move(*by_k[k]);
}

}  // namespace

NetworkModel fit_network(const std::vector<Sample>& samples, const HostModel& host,
                         NetworkModel model, const BandRule& rule) {
  model.host = host;
  std::map<std::pair<std::string, std::string>, std::vector<Row>> groups;
  for (const auto& s : samples) {
    if (s.np < 2) continue;  // one rank communicates nothing
    std::string algo = algorithm_for(model, s.transport, s.np, double(s.bytes));
    groups[{s.transport, algo}].push_back(
        {&s, coefficients(model, s.transport, algo, s.np, double(s.bytes))});
  }
  if (groups.empty()) throw InvalidArgument("fit: no samples with 2 or more ranks");
  const double gamma = host.gamma_s_per_byte;
  for (auto& [key, rows] : groups) {
    const auto& [transport, algo] = key;
    if (rows.size() < 2)
      throw InvalidArgument(
          fmt::format("fit: {} {} has {} sample(s); it needs 2 or more sizes in its range",
                      transport, algo, rows.size()));
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.s->bytes < b.s->bytes; });
    Line whole = fit_least_squares(rows, gamma);
    AlgorithmModel a{whole.cost, whole.fit, {}};
    if (rule.max_bands > 0 && whole.fit.max_rel_error > rule.split_above) {
      // One band would be the least-deviation line: keep least squares then.
      Split split = choose_bands(rows, rule, gamma);
      for (size_t i = 0; split.bands.size() > 1 && i < split.bands.size(); ++i)
        a.bands.push_back({rows[split.cuts[i]].s->bytes, rows[split.cuts[i + 1] - 1].s->bytes,
                           split.bands[i].cost, split.bands[i].fit});
    }
    for (const auto& r : rows) {
      double fitted = apply(r.k, a.at(double(r.s->bytes)), gamma).total();
      model.points.push_back({transport, algo, r.s->np, r.s->bytes, r.s->seconds, fitted});
    }
    model.transports[transport][algo] = a;
  }
  return model;
}

}  // namespace lockstep::plan
