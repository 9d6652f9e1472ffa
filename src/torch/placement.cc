#include "lockstep/torch/placement.h"

#include <malloc.h>
#include <sched.h>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "torch/cpu_load.h"
#include "torch/device.h"

#include "lockstep/base/check.h"
#include "lockstep/base/cpu_topology.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/base/mutex.h"
#include "lockstep/policy/policies.h"

namespace lockstep::torch {

namespace {
std::atomic<bool> bound_by_placement{false};

Mutex applied_mutex;
std::optional<Placement> applied LOCKSTEP_GUARDED_BY(applied_mutex);  // set by place_this_worker
// What apply_placement last bound the process to, and the CPUs it had
// before lockstep first bound it.
struct Binding {
  std::vector<int> before, after;
};
std::optional<Binding> binding LOCKSTEP_GUARDED_BY(applied_mutex);

// The CPUs a placement divides among the host's workers: the process's own,
// or, while it is still bound as apply_placement left it, the ones it had
// before (a second placement, after init() or at an elastic re-formation,
// must not divide one worker's share again). A mask someone else set since
// is respected.
std::vector<int> placement_cpus() {
  std::vector<int> now = allowed_cpus();
  MutexLock lock(applied_mutex);
  return binding && binding->after == now ? binding->before : now;
}

// Alone on the host and not placed by `lockstep run` (started by hand, or by
// srun/mpirun with one task per node): nothing else decided how many CPUs
// this process may use, so other processes' load must be taken into account.
bool placed_by_nobody(int local_size) { return local_size == 1 && !knob_is_set("LOCKSTEP_JOB_ID"); }

// One intra-op thread per CPU that other processes leave idle (cpu_load.h
// says why spinning OpenMP threads on busy CPUs cost 4x).
void fit_threads_to_idle_cpus(Placement& p, const std::vector<int>& cpus) {
  constexpr int kWindowMs = 100;
  const double idle = detail::measure_idle_cpus(cpus, kWindowMs);
  if (idle < 0) return;
  const int threads = detail::threads_for_idle_cpus(idle, p.intra_op_threads);
  if (threads >= p.intra_op_threads) return;
  log(LogLevel::kWarning,
      "placement: other processes keep {:.1f} of this process's {} CPUs busy; using {} intra-op "
      "thread(s) instead of {}, because OpenMP threads sharing busy CPUs make every step several "
      "times slower (set LOCKSTEP_INTRA_OP_THREADS to choose)",
      static_cast<double>(cpus.size()) - idle, cpus.size(), threads, p.intra_op_threads);
  p.reason = fmt::format("{} of {} CPUs idle when init() ran", threads, cpus.size());
  p.intra_op_threads = threads;
}
}  // namespace

std::string Placement::describe() const {
  const std::string where =
      device == DeviceKind::kCuda
          ? fmt::format(
                "cuda:{} (GPU {} of the {} visible; CUDA_VISIBLE_DEVICES={})", device_index,
                device_index, visible_devices,
                std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset")
          : std::string("cpu");
  return fmt::format("{}, {} intra-op thread(s){}, cpus [{}]", where, intra_op_threads,
                     reason.empty() ? "" : " (" + reason + ")",
                     cpus.empty() ? std::string("any") : fmt::format("{}", fmt::join(cpus, ",")));
}

BindTo parse_bind_to(const std::string& text) {
  if (text == "core") return BindTo::kCore;
  if (text == "none") return BindTo::kNone;
  if (text == "auto" || text.empty()) return BindTo::kAuto;
  throw InvalidArgument(fmt::format("LOCKSTEP_BIND_TO='{}' is not one of core, none, auto", text));
}

Placement plan_placement(int local_rank, int local_size, const std::vector<int>& allowed,
                         BindTo bind_to, int intra_op_threads, std::span<const CpuPlace> topology) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    throw InvalidArgument(
        fmt::format("placement: local rank {} not in [0, {})", local_rank, local_size));
  // Whole cores, node by node (Note [Placement order] in src/base/cpu_topology.cc).
  const std::vector<int> cpus = placement_order(allowed, topology);
  const int cores = std::max<int>(1, static_cast<int>(cpus.size()));
  const int share = std::max(1, cores / local_size);
  Placement p;
  p.intra_op_threads = intra_op_threads > 0 ? intra_op_threads : share;
  const bool fits = local_size <= cores;
  const bool bind =
      bind_to == BindTo::kCore || (bind_to == BindTo::kAuto && fits && local_size > 1);
  LOCKSTEP_DCHECK(!bind || !fits || (local_rank + 1) * share <= static_cast<int>(cpus.size()),
                  "placement: local rank {}'s {} cores lie inside the {} placed", local_rank, share,
                  cpus.size());
  if (bind && fits) {
    for (int i = 0; i < share; ++i) p.cpus.push_back(cpus[local_rank * share + i]);
  } else if (bind) {
    p.cpus.push_back(cpus[local_rank % cores]);  // oversubscribed: round robin
  }
  std::sort(p.cpus.begin(), p.cpus.end());  // for people reading describe()
  LOCKSTEP_DCHECK(std::adjacent_find(p.cpus.begin(), p.cpus.end()) == p.cpus.end(),
                  "placement: a worker's cpus are distinct");
  return p;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

namespace {

// sched_setaffinity(0) binds only the calling thread, and threads inherit
// the mask only when they start. The engine's background thread (and any
// timeline writer or OpenMP pool) exists before placement, so each thread
// of the process is bound by its id. An unbound engine thread wakes on the
// other worker's core and preempts its computation; binding it cut the
// held-out program's gap to two independent processes from 12% to 2%
// (docs/performance.md).
void bind_other_threads(const cpu_set_t& set) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t tid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    // A thread that exited meanwhile is no error.
    if (tid > 0 && sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH)
      log(LogLevel::kWarning, "could not bind thread {}: {}", tid, std::strerror(errno));
  }
}

}  // namespace

void apply_placement(const Placement& p) {
  LOCKSTEP_DCHECK_LE(1, p.intra_op_threads, "placement: a worker runs one intra-op thread or more");
  at::set_num_threads(p.intra_op_threads);
  if (p.cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : p.cpus) {
    LOCKSTEP_DCHECK(c >= 0 && c < CPU_SETSIZE, "placement: cpu {} fits a cpu_set_t", c);
    CPU_SET(c, &set);
  }
  std::vector<int> before = placement_cpus();
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    log(LogLevel::kWarning, "could not bind to cpus {}: {}", fmt::join(p.cpus, ","),
        std::strerror(errno));
    return;
  }
  bind_other_threads(set);
  bound_by_placement = true;
  MutexLock lock(applied_mutex);
  binding = Binding{std::move(before), allowed_cpus()};
}

int parse_intra_op_threads(const std::string& text) {
  if (text == "auto" || text.empty()) return 0;
  int threads = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), threads);
  if (ec != std::errc() || end != text.data() + text.size() || threads < 0)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_INTRA_OP_THREADS='{}' is neither auto nor a whole number of threads", text));
  return threads;
}

Placement place_this_worker(int local_rank, int local_size) {
  BindTo bind_to = parse_bind_to(knob_string("LOCKSTEP_BIND_TO"));
  int threads = parse_intra_op_threads(knob_string("LOCKSTEP_INTRA_OP_THREADS"));
  const std::vector<int> cpus = placement_cpus();
  const DeviceChoice device = parse_device(knob_string("LOCKSTEP_DEVICE"));
  Placement p =
      plan_placement(local_rank, local_size, cpus, bind_to, threads, read_cpu_topology(cpus));
  p.visible_devices = device == DeviceChoice::kCpu ? 0 : detail::visible_gpus();
  p.device_index = plan_gpu(device, local_rank, p.visible_devices);
  if (p.device_index >= 0) {
    p.device = DeviceKind::kCuda;
    detail::set_current_gpu(p.device_index);  // before any CUDA work of this process
  }
  p.reason = threads > 0 ? fmt::format("LOCKSTEP_INTRA_OP_THREADS={}", threads)
                         : fmt::format("{} CPUs / {} worker(s) on this host",
                                       std::max<size_t>(1, cpus.size()), local_size);
  if (threads == 0 && placed_by_nobody(local_size)) fit_threads_to_idle_cpus(p, cpus);
  const size_t worker_cpus = p.cpus.empty() ? cpus.size() / local_size : p.cpus.size();
  if (local_rank == 0 && static_cast<size_t>(p.intra_op_threads) > std::max<size_t>(1, worker_cpus))
    log(LogLevel::kWarning,
        "placement: {} intra-op threads per worker but {} worker(s) share {} CPUs here; "
        "threads waiting for time slices make every step slower (--threads-per-worker auto "
        "gives {})",
        p.intra_op_threads, local_size, cpus.size(), std::max<size_t>(1, worker_cpus));
  apply_placement(p);
  log(LogLevel::kInfo, "placement: {}", p.describe());
  MutexLock lock(applied_mutex);
  applied = p;
  return p;
}

Placement placement() {
  MutexLock lock(applied_mutex);
  if (applied) return *applied;
  Placement p;
  p.intra_op_threads = at::get_num_threads();
  p.reason = "not placed: init() has not run";
  return p;
}

void bind_before_engine() {
  if (!knob_is_set("LOCKSTEP_LOCAL_SIZE") || !knob_is_set("LOCKSTEP_LOCAL_RANK")) return;
  const int local_size = static_cast<int>(knob_int("LOCKSTEP_LOCAL_SIZE"));
  const int local_rank = static_cast<int>(knob_int("LOCKSTEP_LOCAL_RANK"));
  if (local_size <= 1 || local_rank < 0 || local_rank >= local_size) return;  // init() decides
  const std::vector<int> cpus = placement_cpus();
  const Placement p = plan_placement(
      local_rank, local_size, cpus, parse_bind_to(knob_string("LOCKSTEP_BIND_TO")),
      parse_intra_op_threads(knob_string("LOCKSTEP_INTRA_OP_THREADS")), read_cpu_topology(cpus));
  if (!p.cpus.empty()) apply_placement(p);
}

int worker_cpu_count(int local_size) {
  const int allowed = std::max<int>(1, static_cast<int>(allowed_cpus().size()));
  if (bound_by_placement.load()) return allowed;  // the set is this worker's own
  return policy::worker_cpus(allowed, local_size);
}

bool overlap_pays(bool one_host, int worker_cpus, int intra_op_threads) {
  return policy::overlap_pays(one_host, worker_cpus, intra_op_threads);  // the planner's rule too
}

void tune_malloc() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
}

}  // namespace lockstep::torch
