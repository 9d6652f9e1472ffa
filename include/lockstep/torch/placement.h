// Where a worker computes: device, intra-op threads and CPU affinity, derived
// from the worker's local rank and the number of workers on the host.
//
// LOCKSTEP_BIND_TO = core | none | auto (docs/torch.md):
//   core: worker i of n gets the i-th block of cpus/n of the allowed CPUs,
//         taken in (NUMA node, package, core) order so that a block holds
//         whole cores within one node where the counts allow (Note
//         [Placement order] in src/base/cpu_topology.cc), and that many
//         intra-op threads;
//   none: no affinity; threads = cores/n;
//   auto: core when the workers fit on the cores (n <= cores), else none.
// LOCKSTEP_INTRA_OP_THREADS (`lockstep run --threads-per-worker T|auto`;
// auto or 0: cores/n, at least 1) overrides the count.
// A process that no launcher placed (started by hand, or alone on its host
// under srun/mpirun) gets one thread per CPU that other processes leave idle
// when init() runs (at least 1): OpenMP threads sharing busy CPUs made such a
// process several times slower than one thread (docs/torch.md).
//
// The GPU a worker computes on (LOCKSTEP_DEVICE) and how its CUDA tensors
// travel are device.h's choices; place_this_worker() applies them.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "lockstep/base/cpu_topology.h"
#include "lockstep/torch/device.h"

namespace lockstep::torch {

enum class DeviceKind { kCpu, kCuda };

struct Placement {
  DeviceKind device = DeviceKind::kCpu;
  int device_index = -1;    // CUDA ordinal among the visible devices; -1 on the CPU
  int visible_devices = 0;  // GPUs LibTorch sees in this process
  int intra_op_threads = 1;
  std::vector<int> cpus;  // empty: no affinity set
  std::string reason;     // why this thread count, for people reading logs
  std::string describe() const;
  ::torch::Device torch_device() const {
    return device == DeviceKind::kCuda
               ? ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(device_index))
               : ::torch::Device(::torch::kCPU);
  }
};

enum class BindTo { kCore, kNone, kAuto };
BindTo parse_bind_to(const std::string& text);  // throws InvalidArgument naming the knob
// LOCKSTEP_INTRA_OP_THREADS: 0 for auto (or "0"), else the count; throws
// InvalidArgument naming the knob.
int parse_intra_op_threads(const std::string& text);

// Pure: the placement for worker local_rank of local_size over allowed_cpus,
// which are divided in placement_order(allowed_cpus, topology) (topology:
// read_cpu_topology; without it, CPU-number order). Its `cpus` are sorted.
Placement plan_placement(int local_rank, int local_size, const std::vector<int>& allowed_cpus,
                         BindTo bind_to, int intra_op_threads = 0,
                         std::span<const CpuPlace> topology = {});
// The CPUs this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();
// From the knobs and the process's world; applies it (threads, affinity).
Placement place_this_worker(int local_rank, int local_size);
// The placement init() applied (the last place_this_worker); before init(),
// LibTorch's current thread count and no affinity. Thread-safe.
Placement placement();
// Sets the intra-op threads and binds every thread of the process that
// exists when it runs (the engine's background thread included), not only
// the caller; threads started later inherit the caller's mask.
void apply_placement(const Placement& placement);

// init(), before the engine starts: a worker the launcher placed
// (LOCKSTEP_LOCAL_RANK/LOCKSTEP_LOCAL_SIZE, more than one on the host) is
// bound to its CPUs already, so the pages of the shared-memory segment it
// first touches are allocated on its own NUMA node (docs/shm.md, Note [First
// touch]) and the engine's threads start with its mask. place_this_worker
// after init() decides as always, over the CPUs the process had before any
// binding. A no-op for other processes and when nothing is bound.
void bind_before_engine();
// CPUs this worker computes on: its affinity set when apply_placement bound
// it, else an equal share of the allowed CPUs among the host's workers.
int worker_cpu_count(int local_size);
// Pure: whether overlapping gradient allreduce with backward can pay. Across
// hosts, yes (the network works while the cores compute); on one host the
// shared-memory transfer is CPU work, so only when a core is left over.
bool overlap_pays(bool one_host, int worker_cpus, int intra_op_threads);

// glibc: raise M_TRIM_THRESHOLD and M_MMAP_THRESHOLD together so freed
// activation buffers are reused instead of being returned to the kernel and
// page-faulted back every step (setting only the trim threshold would freeze
// the mmap threshold at 128 KiB). Idempotent.
void tune_malloc();

}  // namespace lockstep::torch
