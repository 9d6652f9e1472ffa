// `lockstep bench fit` (lockstep-bench-fit): fits the planner's network model
// (docs/plan.md). The driver runs the worker under `lockstep run` for each
// world size, times the host's copy and reduction kernels itself, fits
// alpha and beta per algorithm and prints the residuals.
#pragma once

#include <cstddef>
#include <vector>

#include "lockstep/plan/network.h"

namespace lockstep::bench_fit {

// `cold`: every timed allreduce starts from a rewritten, evicted buffer;
// `busy_threads`: that many computing threads run beside the sweep.
int worker_main(const std::vector<size_t>& sizes, double seconds, bool cold, int busy_threads);

// gamma (reduction, per byte of one extra operand) and copy speed of this
// host, by least squares over a size sweep; prints the fit.
// `cold`: every timing starts with the buffers out of the cache.
plan::HostModel measure_host(bool print, bool cold);

// The last-level cache (sysconf; 32 MiB where the system does not say).
size_t last_level_cache_bytes();

}  // namespace lockstep::bench_fit
