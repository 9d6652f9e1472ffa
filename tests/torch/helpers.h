// Shared pieces of the lockstep::torch tests: a worker harness that starts
// the process-wide engine in each forked worker, and small deterministic
// models and data.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>

#include "lockstep/engine/engine.h"
#include "lockstep/torch/torch.h"
#include "support/multiproc.h"

namespace lockstep::torch::testing {

// Runs body() in `size` real processes, each with lockstep::torch::init()
// done over the shared-memory transport (single-threaded, unbound).
inline void run_torch_workers(int size, const std::function<void()>& body,
                              std::map<std::string, std::string> env = {}) {
  lockstep::testing::MultiProcOptions options;
  options.env = std::move(env);
  options.env.emplace("LOCKSTEP_BIND_TO", "none");
  options.env.emplace("LOCKSTEP_INTRA_OP_THREADS", "1");
  auto results = lockstep::testing::run_workers_raw(
      size,
      [&](const comm::WorldInfo& world) {
        engine::init(world);
        lockstep::torch::init();
        body();
        lockstep::torch::shutdown();
      },
      options);
  lockstep::testing::expect_all_ok(results);
}

// A small MLP without batch statistics, so 2 x B and 1 x 2B are equivalent.
inline ::torch::nn::Sequential make_mlp(uint64_t seed) {
  ::torch::manual_seed(seed);
  return ::torch::nn::Sequential(::torch::nn::Linear(8, 16), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(16, 4));
}

inline ::torch::Tensor flat_parameters(::torch::nn::Module& module) {
  std::vector<::torch::Tensor> parts;
  for (auto& p : module.parameters()) parts.push_back(p.detach().flatten());
  return ::torch::cat(parts);
}

}  // namespace lockstep::torch::testing
