// The planner beside `lockstep bench train`'s measurements: which layout
// plan::rank_layouts recommends for this host, and how its predicted
// samples/s compare with the measured ones (docs/plan.md, "Layouts of one
// host"). Its inputs come from the benchmark itself: a profile recorded by
// one lockstep worker at 1 thread, the serial fraction from plain 1x1 and
// 1xC, the contention from the Cx1 ceiling, and a shm fit at the layouts'
// worker counts (`lockstep bench fit`) unless a network file is given.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/plan/layouts.h"

namespace lockstep::bench_train {

// Median samples/s of the variants the prediction needs; 0: not measured.
struct Measured {
  int cpus = 1;
  int64_t batch_size = 64;  // per worker
  double plain_1x1 = 0;     // tuned, 1 thread
  double plain_1xc = 0;     // tuned, cpus threads
  double ceiling_cx1 = 0;   // cpus independent tuned 1x1 processes, summed
  double lockstep_1x1 = 0;
  std::vector<std::pair<plan::Layout, double>> layouts;  // lockstep N x T
};

// Serial fraction from plain 1x1 and 1xC, contention from the Cx1 ceiling
// against plain 1x1; the defaults where they were not measured.
plan::ThreadScaling fit_scaling(const Measured& m);

// Runs `command` (a lockstep worker at 1 thread with LOCKSTEP_PROFILE set to
// `path`) and loads the profile; nullopt (with the reason on stderr) when it
// fails.
std::optional<plan::Profile> record_profile(const std::string& command, const std::string& path);

// `lockstep bench fit --backend shm` at each worker count above 1 (short
// sweep), or `network_file` when given; nullopt (reason on stderr) when
// there is no shm fit to be had.
std::optional<plan::NetworkModel> shm_network(const std::string& network_file,
                                              const std::vector<int>& worker_counts,
                                              const std::string& path);

// Prints the predicted samples/s beside the measured per layout, the ratio,
// and whether the recommended layout is the measured fastest; JSON lines to
// stdout and `json` (when not null).
void print_predictions(const Measured& m, const plan::Profile& profile,
                       const plan::NetworkModel& network, FILE* json);

}  // namespace lockstep::bench_train
