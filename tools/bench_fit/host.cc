// The host's own costs for the network model: how fast this machine copies
// and reduces, measured in one process.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "lockstep/comm/kernels.h"
#include "lockstep/plan/fit.h"
#include "tools/bench_fit/fit.h"

namespace lockstep::bench_fit {
namespace {

using Clock = std::chrono::steady_clock;

// Reads twice the last-level cache, so what the next timing touches comes
// from memory (as a gradient written early in backward does).
void evict_caches() {
  static std::vector<uint64_t> junk(2 * last_level_cache_bytes() / sizeof(uint64_t), 1);
  static volatile uint64_t sink = 0;
  uint64_t sum = 0;
  for (size_t i = 0; i < junk.size(); i += 8) sum += junk[i];
  sink = sum;
  (void)sink;  // a read, so -Wunused-but-set-variable sees a use (the store is the point)
}

template <typename F>
double median_seconds(F&& f, bool cold) {
  f();  // warm: page faults, caches
  std::vector<double> t;
  double timed = 0;
  while (t.size() < 5 || (timed < 0.05 && t.size() < (cold ? 20u : 200u))) {
    if (cold) evict_caches();
    auto s = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - s).count());
    timed += t.back();
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

plan::HostModel measure_host(bool print, bool cold) {
  std::vector<std::pair<double, double>> reduce, copy;
  for (size_t bytes = 256 << 10; bytes <= (32u << 20); bytes *= 2) {
    size_t n = bytes / 4;
    std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n);
    const void* in[2] = {a.data(), b.data()};
    reduce.push_back({double(bytes), median_seconds(
                                         [&] {
                                           comm::kernels::reduce(comm::DataType::kFloat32,
                                                                 comm::ReduceOp::kSum, in, 2,
                                                                 out.data(), n, 1);
                                         },
                                         false)});
    copy.push_back(
        {double(bytes), median_seconds([&] { std::memcpy(out.data(), a.data(), bytes); }, cold)});
  }
  // gamma stays hot even for cold fits: in an allreduce one operand comes
  // from the peer's slot, which the peer has just written; the fitted beta
  // absorbs what cold inputs add (the two cannot be told apart, section 2
  // of docs/plan.md). Copies (fusion in and out, the 1/size pass) touch
  // the gradients themselves, so they are timed cold.
  plan::LineFit g = plan::fit_line(reduce), c = plan::fit_line(copy);
  if (print)
    fmt::print(
        "# host: f32 sum of 2 operands {:.2f} GB/s of operand (gamma {:.3g} s/B, rms "
        "{:.1f}%), memcpy ({} buffers) {:.2f} GB/s (copy {:.3g} s/B, rms {:.1f}%)\n",
        1e-9 / g.slope, g.slope, 100 * g.rms_rel_error, cold ? "cold" : "hot", 1e-9 / c.slope,
        c.slope, 100 * c.rms_rel_error);
  // The engine's per-cycle overhead (a condition-variable wake-up and the
  // negotiation bookkeeping) is not measured here: docs/plan.md.
  return {.gamma_s_per_byte = g.slope,
          .copy_s_per_byte = c.slope,
          .cycle_overhead_s = plan::default_host().cycle_overhead_s};
}

}  // namespace lockstep::bench_fit
