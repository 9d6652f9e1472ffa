// The measuring side of `lockstep bench fit`: one allreduce sweep, run by
// every rank under `lockstep run`; rank 0 prints one JSON line per size.
//
// Cold buffers (`--buffers cold`): training allreduces gradients that
// backward wrote well before (with overlap off, all of backward before),
// and a model's gradients (97.5 MiB for ResNet-50) do not fit in the
// last-level cache, so shared memory moves them from and to memory. Timing
// one buffer back to back instead measures the cache. In cold mode each
// iteration takes the next slice of an arena of twice the last-level
// cache, so the slice was last touched an arena's worth of traffic ago and
// is no longer cached, and the allreduces still run back to back, as the
// engine runs a step's batches (no barrier or untimed gap between them,
// which would put ranks to sleep and time their wake-ups).
#include "tools/bench_fit/fit.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/comm/communicator.h"

namespace lockstep::bench_fit {
namespace {

using Clock = std::chrono::steady_clock;
using comm::DataType;
using comm::ReduceOp;

// Successive slices of an arena twice the last-level cache (page-aligned,
// at least two slices), so each allreduce reads and writes data that the
// cache no longer holds.
class Arena {
 public:
  Arena(size_t bytes, bool cold) {
    const size_t stride = (bytes + 4095) / 4096 * 4096;
    const size_t slices = cold ? std::max<size_t>(2, 2 * last_level_cache_bytes() / stride) : 1;
    stride_ = stride / sizeof(float);
    data_.assign(stride_ * slices, 1.0f);
    slices_ = slices;
  }
  float* next() {
    float* p = data_.data() + stride_ * slice_;
    slice_ = (slice_ + 1) % slices_;
    return p;
  }

 private:
  std::vector<float> data_;
  size_t stride_ = 0, slices_ = 1, slice_ = 0;
};

// Median and mean over iterations of the slowest rank's time, like
// `lockstep bench allreduce`: rank 0 picks the iteration count so all
// ranks agree.
struct Timing {
  double median_s = 0, mean_s = 0;
};

Timing measure(comm::Communicator& c, Arena& arena, size_t count, double seconds) {
  auto once = [&] {
    float* buf = arena.next();
    auto s = Clock::now();
    c.allreduce(buf, count, DataType::kFloat32, ReduceOp::kSum);
    return std::chrono::duration<double>(Clock::now() - s).count();
  };
  for (int i = 0; i < 3; ++i) once();
  double per = 0;
  for (int i = 0; i < 3; ++i) per += once() / 3;
  int64_t iters =
      std::clamp<int64_t>(static_cast<int64_t>(seconds / std::max(per, 1e-9)), 5, 20000);
  c.broadcast(&iters, 1, DataType::kInt64, 0);
  std::vector<double> times(static_cast<size_t>(iters));
  for (auto& t : times) t = once();
  c.allreduce(times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / double(times.size());
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return {times[times.size() / 2], mean};
}

}  // namespace

// sysfs first: in a VM, glibc's sysconf reads the host CPU's cpuid and can
// report every L3 of the package (320 MiB here, against the 32 MiB that
// the vCPUs share).
size_t last_level_cache_bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t kib = 0;
  std::string unit;
  if (in >> kib && kib > 0) {  // "32768K"
    in >> unit;
    if (!unit.empty() && unit[0] == 'M') kib <<= 10;
    return kib << 10;
  }
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
}

// Busy threads beside the sweep, as training's intra-op threads are beside
// its collectives: where ranks share cores (network-namespace hosts on one
// machine), every message then waits for the scheduler to preempt a
// computing thread, which an idle sweep never measures. L1-resident
// arithmetic, so they take cores and not memory bandwidth.
class BusyThreads {
 public:
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        double x = 1.0;
        while (!stop_.load(std::memory_order_relaxed))
          for (int k = 0; k < 4096; ++k) x = x * 0.999999 + 1e-9;
        sink_ = x;
      });
  }
  ~BusyThreads() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  volatile double sink_ = 0;
  std::vector<std::thread> threads_;
};

int worker_main(const std::vector<size_t>& sizes, double seconds, bool cold, int busy_threads) {
  auto c = comm::Communicator::from_environment();
  BusyThreads busy(busy_threads);
  for (size_t bytes : sizes) {
    size_t count = std::max<size_t>(1, bytes / 4);
    Arena arena(count * sizeof(float), cold);
    Timing t = measure(*c, arena, count, seconds);
    if (c->rank() == 0) {
      nlohmann::json j = {{"transport", std::string(c->backend_name())},
                          {"np", c->size()},
                          {"bytes", count * 4},
                          {"seconds", t.median_s},
                          {"mean_seconds", t.mean_s}};
      fmt::print("{}\n", j.dump());
      std::fflush(stdout);
    }
  }
  c->barrier();
  return 0;
}

}  // namespace lockstep::bench_fit
