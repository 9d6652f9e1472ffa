// Small statistics the planner needs (medians, robust spread, the expected
// maximum of n normal draws for stragglers), shared with its tools (`plan
// validate` takes the same median of its measurements). In `detail`: helpers,
// not a stable API. Pure functions; thread-safe.
#pragma once

#include <vector>

#include "lockstep/profile/stats.h"

namespace lockstep::plan::detail {

using profile::detail::median;        // 0 for an empty vector
using profile::detail::robust_sigma;  // 1.4826 x median absolute deviation
// E[max of n independent standard normal draws] (0 for n <= 1): how much
// later than the average rank the slowest of n finishes, in sigmas.
double expected_max_normal(int n);

}  // namespace lockstep::plan::detail
