// `lockstep bench fit` (lockstep-bench-fit): fits the planner's network model
// (docs/plan.md). The driver runs the worker under `lockstep run` for each
// world size, times the host's copy and reduction kernels itself, fits
// alpha and beta per algorithm and prints the residuals.
#pragma once

#include <cstddef>
#include <vector>

#include "lockstep/plan/network.h"

namespace lockstep::bench_fit {

int worker_main(const std::vector<size_t>& sizes, double seconds);

// gamma (reduction, per byte of one extra operand) and copy speed of this
// host, by least squares over a size sweep; prints the fit.
plan::HostModel measure_host(bool print);

}  // namespace lockstep::bench_fit
