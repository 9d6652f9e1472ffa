#include "lab_gd/regression.h"

namespace lockstep::examples::lab {

Data make_data(int64_t n, Params truth, double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  Data d;
  for (int64_t i = 0; i < n; ++i) {
    const double x = unit(rng);
    d.x.push_back(x);
    d.y.push_back(truth.w * x + truth.b + noise * unit(rng));
  }
  return d;
}

double loss(const Data& data, Params p) {
  double sum = 0;
  for (size_t i = 0; i < data.x.size(); ++i) {
    const double r = p.w * data.x[i] + p.b - data.y[i];
    sum += r * r;
  }
  return data.x.empty() ? 0 : sum / static_cast<double>(data.x.size());
}

Params closed_form(const Data& data) {
  const double n = static_cast<double>(data.x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < data.x.size(); ++i) {
    sx += data.x[i], sy += data.y[i];
    sxx += data.x[i] * data.x[i], sxy += data.x[i] * data.y[i];
  }
  const double w = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {w, (sy - w * sx) / n};
}

Params step(const Data& data, const std::vector<int64_t>& order, int64_t begin, int64_t end,
            Params p, double lr) {
  double gw = 0, gb = 0;
  for (int64_t k = begin; k < end; ++k) {
    const auto i = static_cast<size_t>(order[static_cast<size_t>(k)]);
    const double r = p.w * data.x[i] + p.b - data.y[i];
    gw += 2 * r * data.x[i];
    gb += 2 * r;
  }
  const double n = static_cast<double>(end - begin);
  return {p.w - lr * gw / n, p.b - lr * gb / n};
}

}  // namespace lockstep::examples::lab
