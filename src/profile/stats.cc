#include "lockstep/profile/stats.h"

#include <algorithm>
#include <cmath>

namespace lockstep::profile::detail {

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

}  // namespace lockstep::profile::detail
