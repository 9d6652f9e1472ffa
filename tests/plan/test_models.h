// Profiles and networks for the planner's tests.
#pragma once

#include <fmt/format.h>

#include "lockstep/plan/network.h"
#include "lockstep/plan/profile.h"

namespace lockstep::plan::testing {

// `grads` gradients of `bytes` each, ready evenly through a 60 ms backward
// (the last registered first), after a 30 ms forward; 10 ms optimizer.
// Steps alternate +-jitter_ms around 100 ms.
inline Profile make_profile(int grads = 20, int64_t bytes = 1 << 20, double jitter_ms = 0) {
  Profile p;
  for (int i = 0; i < 10; ++i) {
    double j = (i % 2 ? 1 : -1) * jitter_ms;
    p.steps.push_back({100 + j, 30 + j, 60, 0, 10, 64});
  }
  for (int i = 0; i < grads; ++i)
    p.gradients.push_back({fmt::format("g{}", i), bytes, "f32", 60.0 * (grads - i) / grads, {}});
  return p;
}

inline NetworkModel make_network(double alpha_s = 20e-6, double beta = 1e-9) {
  NetworkModel m;
  m.name = "test";
  m.host =
      HostModel{.gamma_s_per_byte = 2e-10, .copy_s_per_byte = 1e-10, .cycle_overhead_s = 20e-6};
  m.transports["shm"]["one_step"].cost = {1e-6, 1e-10};
  m.transports["shm"]["two_step"].cost = {2e-6, 2e-10};
  m.transports["gloo"]["ring"].cost = {alpha_s, beta};
  return m;
}

}  // namespace lockstep::plan::testing
