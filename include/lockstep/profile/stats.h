// The small statistics of a profile's summary (medians, robust spread),
// shared with the planner and its tools (plan/stats.h). In `detail`:
// helpers, not a stable API. Pure functions; thread-safe.
#pragma once

#include <vector>

namespace lockstep::profile::detail {

double median(std::vector<double> v);               // 0 for an empty vector
double robust_sigma(const std::vector<double>& v);  // 1.4826 x median absolute deviation

}  // namespace lockstep::profile::detail
