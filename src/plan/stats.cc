#include "lockstep/plan/stats.h"

#include <algorithm>
#include <cmath>

namespace lockstep::plan::detail {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double hi = v[mid];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

double robust_sigma(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double m = median(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * median(dev);
}

// E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by Simpson's rule on
// [-10, 10]; exact enough (1e-6) for any n a job can have, and ~50 us.
double expected_max_normal(int n) {
  if (n <= 1) return 0;
  const int steps = 4000;
  const double lo = -10, hi = 10, h = (hi - lo) / steps;
  double sum = 0;
  for (int i = 0; i <= steps; ++i) {
    double x = lo + i * h;
    double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    double f = x * n * pdf * std::pow(cdf, n - 1);
    sum += f * (i == 0 || i == steps ? 1 : (i % 2 ? 4 : 2));
  }
  return sum * h / 3;
}

}  // namespace lockstep::plan::detail
