// Hybrid layouts of one host: how many workers (ranks) and how many
// intra-op threads each, for a host of C CPUs, predicted from one profile.
// `lockstep plan layouts` prints them; `lockstep bench train` sets them
// beside what it measures (docs/plan.md, "Layouts of one host").
//
// Note [Layout model]
//   compute(N x T) = compute(profile) x A(T) / A(T0) x K(N) / K(N0)
//     A(T) = s + (1 - s) / T    Amdahl's law for one worker's step: s is the
//                               serial fraction (measured: fit_serial_fraction
//                               on the step at two thread counts; else
//                               kDefaultSerialFraction), T0 the profile's threads;
//                               s > 1 fits a step measured *slower* with more
//                               threads (they wait for each other or for cores
//                               other processes hold): A then grows with T
//                               towards s
//     K(N) = 1 + k (N - 1)      co-located workers contend for memory
//                               bandwidth and the last-level cache: k per
//                               extra worker (fit_contention; else 0), N0 the
//                               profile's workers on its host
//   step(N x T) = simulate() of one node of N ranks with T threads on C
//   cores, so the shm allreduce at N ranks (shm_allreduce_choice), the
//   overlap rule (overlap_pays with worker_cpus(C, N)) and communication
//   taking the training cores where no core is spare are the runtime's own
//   decisions, not copies.
//   samples/s = N x the profile's samples per step / step: the batch is per
//   worker (as `lockstep bench train` runs it), so a layout with more
//   workers takes a larger global batch per step.
// Not modelled: more threads than cores (a layout with N x T > C is
// refused), hyper-threads as cores, NUMA placement beyond K(N).
//
// Pure functions of their arguments; thread-safe. Throw InvalidArgument
// naming the bad value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lockstep/plan/network.h"
#include "lockstep/plan/profile.h"
#include "lockstep/plan/simulator.h"

namespace lockstep::plan {

// s when nothing measured it, a guess that every output marks "default":
// FashionCnn's step (batch 64) ran 1.69x faster on 2 threads than on 1 in
// the quiet round of docs/performance.md (s = 0.18); larger convolutions
// scale better. Measure it (docs/plan.md, "Layouts of one host").
inline constexpr double kDefaultSerialFraction = 0.15;

struct ThreadScaling {
  double serial_fraction = kDefaultSerialFraction;  // s, >= 0 (> 1: threads slow it)
  double contention = 0;                            // k, >= 0
  std::string source = "default";                   // how s and k were obtained
};

// A(T) = s + (1 - s) / T: one worker's compute at T threads over its
// compute at 1 thread.
double amdahl_time(double serial_fraction, int threads);
// s from one worker's compute time at two different thread counts: the
// curve A passes through both. At least 0 (a measurement better than
// linear speed-up gives 0); above 1 where more threads were slower.
double fit_serial_fraction(double ms_a, int threads_a, double ms_b, int threads_b);
// k from one worker's step time alone and beside workers - 1 others running
// the same step (each with the same threads), clamped to >= 0.
double fit_contention(double alone_ms, double colocated_ms, int workers);

struct Layout {
  int workers = 1, threads = 1;
  std::string name() const;  // "2x8"
  bool operator==(const Layout&) const = default;
};

// Every layout the placement gives on `host_cpus` CPUs when the threads are
// left to it: N x worker_cpus(C, N) for N = 1..C (N x T = C where N
// divides C, fewer CPUs used where it does not).
std::vector<Layout> placement_layouts(int host_cpus);
// "1x16,2x8,4x4" (WORKERSxTHREADS, comma-separated); `what` names the
// option in errors.
std::vector<Layout> parse_layouts(std::string_view text, std::string_view what);

// The profile with every phase and every gradient's ready time multiplied
// by `factor` (> 0).
Profile scale_profile(Profile profile, double factor);

// compute(layout) / compute(profile) (Note [Layout model]).
double compute_scale(const ThreadScaling& scaling, const Profile& profile, Layout layout);

struct LayoutQuery {
  int host_cpus = 0;
  ThreadScaling scaling;
  // Fusion, overlap, compression, jitter; the topology, cores and threads
  // are set per layout (one node).
  Scenario scenario;
  std::vector<Layout> layouts;  // empty: placement_layouts(host_cpus)
};

struct LayoutPrediction {
  Layout layout;
  double compute_scale = 1;  // compute_scale() of this layout
  StepPrediction step;       // the simulator's prediction of its step
  double ratio_to_best = 0;  // samples/s over the best layout's (rank_layouts)
};

// One layout (N x T <= C). The network needs shm costs from N = 2 up.
LayoutPrediction predict_layout(const Profile& profile, const NetworkModel& network,
                                const LayoutQuery& query, Layout layout);
// Every layout of the query, fastest (samples/s) first, ties to fewer
// workers; front() is the recommended one.
std::vector<LayoutPrediction> rank_layouts(const Profile& profile, const NetworkModel& network,
                                           const LayoutQuery& query);

}  // namespace lockstep::plan
