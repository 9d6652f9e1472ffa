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

// Fits alpha and beta of every (transport, algorithm) the samples exercise,
// with gamma fixed from `host` (measured separately: with the ring's fixed
// ratio of bytes sent to bytes reduced, beta and gamma are not separable
// from allreduce timings alone). The algorithm of each sample is the one
// the transport picks at that size (cost.h). Returns the model with every
// sample as a MeasuredPoint (measured vs fitted). Throws InvalidArgument
// when an algorithm has fewer than 2 samples.
NetworkModel fit_network(const std::vector<Sample>& samples, const HostModel& host,
                         NetworkModel shape);

}  // namespace lockstep::plan
