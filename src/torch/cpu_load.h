// How busy this process's CPUs are with other work, from /proc/stat. Used to
// pick a safe intra-op thread count for a process that no launcher placed.
// Internal to the torch layer.
//
// Why it matters: LibTorch's OpenMP threads spin-wait (libgomp: ~3 ms per
// wait unless OMP_WAIT_POLICY=PASSIVE was set before the program started),
// and every parallel region waits for its slowest thread. With one thread
// per CPU and another process on one of the CPUs, each of the thousands of
// regions per step waits for a scheduler time slice. Measured on the 2-CPU
// machine with one CPU-bound competitor, a small CNN step: 2 threads 1649
// ms, 1 thread 347 ms (docs/torch.md, "Threads of a process started without
// the launcher").
#pragma once

#include <string_view>
#include <vector>

namespace lockstep::torch::detail {

// Per-CPU jiffies from one /proc/stat snapshot: idle (idle + iowait) and total.
struct CpuTimes {
  int cpu = -1;
  unsigned long long idle = 0, total = 0;
};
std::vector<CpuTimes> parse_proc_stat(std::string_view text);

// Idle CPUs (a fraction summed over `cpus`) between two snapshots.
double idle_cpus_between(const std::vector<CpuTimes>& before, const std::vector<CpuTimes>& after,
                         const std::vector<int>& cpus);

// Samples /proc/stat twice, `window_ms` apart; -1 when it cannot be read.
double measure_idle_cpus(const std::vector<int>& cpus, int window_ms);

// Intra-op threads for a process alone on its host: one per CPU that other
// processes leave idle (rounded), at least 1, at most `cpus`.
int threads_for_idle_cpus(double idle_cpus, int cpus);

}  // namespace lockstep::torch::detail
