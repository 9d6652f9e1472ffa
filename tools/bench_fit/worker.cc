// The measuring side of `lockstep bench fit`: one allreduce sweep, run by
// every rank under `lockstep run`; rank 0 prints one JSON line per size.
#include "bench_fit/fit.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/comm/communicator.h"

namespace lockstep::bench_fit {
namespace {

using Clock = std::chrono::steady_clock;
using comm::DataType;
using comm::ReduceOp;

// Median over iterations of the slowest rank's time, like `lockstep bench
// allreduce`: rank 0 picks the iteration count so all ranks agree.
double measure(comm::Communicator& c, std::vector<float>& buf, size_t count, double seconds) {
  for (int i = 0; i < 3; ++i) c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  double per = std::chrono::duration<double>(Clock::now() - t0).count() / 3;
  int64_t iters = std::clamp<int64_t>(static_cast<int64_t>(seconds / std::max(per, 1e-9)), 5, 20000);
  c.broadcast(&iters, 1, DataType::kInt64, 0);
  std::vector<double> times(static_cast<size_t>(iters));
  for (auto& t : times) {
    auto s = Clock::now();
    c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    t = std::chrono::duration<double>(Clock::now() - s).count();
  }
  c.allreduce(times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

int worker_main(const std::vector<size_t>& sizes, double seconds) {
  auto c = comm::Communicator::from_environment();
  std::vector<float> buf;
  for (size_t bytes : sizes) {
    size_t count = std::max<size_t>(1, bytes / 4);
    buf.assign(count, 1.0f);
    double s = measure(*c, buf, count, seconds);
    if (c->rank() == 0) {
      nlohmann::json j = {{"transport", std::string(c->backend_name())}, {"np", c->size()},
                          {"bytes", count * 4}, {"seconds", s}};
      fmt::print("{}\n", j.dump());
      std::fflush(stdout);
    }
  }
  c->barrier();
  return 0;
}

}  // namespace lockstep::bench_fit
