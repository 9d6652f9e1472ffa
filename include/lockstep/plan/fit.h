// Least-squares fits of the network model from measured collectives
// (`lockstep bench fit`). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/plan/network.h"

namespace lockstep::plan {

// One timed allreduce: median seconds for `bytes` per rank among `np` ranks.
struct Sample {
  std::string transport;  // shm | gloo | mpi
  int np = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// y = intercept + slope * x, minimising the squared *relative* error (so
// small sizes count as much as large ones). Slope and intercept are kept
// >= 0 (a negative one is refitted as 0).
struct LineFit {
  double intercept = 0, slope = 0;
  double rms_rel_error = 0, max_rel_error = 0;
};
LineFit fit_line(const std::vector<std::pair<double, double>>& xy);

// When the least-squares line over a sweep misses one of its own points by
// more than `split_above`, the sweep gets size bands instead (segmented
// regression): for k bands, the k contiguous ranges of sizes, each of
// min_sizes distinct sizes or more, whose lines have the least total
// absolute relative deviation, each line fitted by least absolute relative
// deviation (robust to the erratic medians of small messages; docs/plan.md).
// Starting from k = 1, the fit moves to the fewest bands k' > k whose total
// deviation is below `gain` x that of k, for as long as the largest
// residual of k is above `split_above`; if that ends at k = 1, the
// least-squares line stays (no bands). So a sweep that one line follows, or
// that has too few sizes for two bands, keeps its line, and a bent sweep
// gets at most max_bands lines (0 or 1: never split).
struct BandRule {
  int max_bands = 3;
  int min_sizes = 3;
  double split_above = 0.10;
  double gain = 0.8;
};

// Fits alpha and beta of every (transport, algorithm) the samples exercise,
// with gamma fixed from `host` (measured separately: with the ring's fixed
// ratio of bytes sent to bytes reduced, beta and gamma are not separable
// from allreduce timings alone), as one line over all sizes and, where
// `rule` says so, as size bands (AlgorithmModel::bands) keyed by the
// samples' per-rank bytes. The algorithm of each sample is the one the
// transport picks at that size (cost.h). Returns the model with every
// sample as a MeasuredPoint (measured vs fitted by the bands, or the line
// where there are none). Throws InvalidArgument when an algorithm has
// fewer than 2 samples.
NetworkModel fit_network(const std::vector<Sample>& samples, const HostModel& host,
                         NetworkModel shape, const BandRule& rule = {});

}  // namespace lockstep::plan
