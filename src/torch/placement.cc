#include "lockstep/torch/placement.h"

#include <malloc.h>
#include <sched.h>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <mutex>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"

namespace lockstep::torch {

namespace {
std::atomic<bool> bound_by_placement{false};
}  // namespace

std::string Placement::describe() const {
  return fmt::format("cpu, {} intra-op thread(s), cpus [{}]", intra_op_threads,
                     cpus.empty() ? std::string("any") : fmt::format("{}", fmt::join(cpus, ",")));
}

BindTo parse_bind_to(const std::string& text) {
  if (text == "core") return BindTo::kCore;
  if (text == "none") return BindTo::kNone;
  if (text == "auto" || text.empty()) return BindTo::kAuto;
  throw InvalidArgument(
      fmt::format("LOCKSTEP_BIND_TO='{}' is not one of core, none, auto", text));
}

Placement plan_placement(int local_rank, int local_size, const std::vector<int>& cpus,
                         BindTo bind_to, int intra_op_threads) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    throw InvalidArgument(fmt::format("placement: local rank {} not in [0, {})", local_rank,
                                      local_size));
  const int cores = std::max<int>(1, static_cast<int>(cpus.size()));
  const int share = std::max(1, cores / local_size);
  Placement p;
  p.intra_op_threads = intra_op_threads > 0 ? intra_op_threads : share;
  const bool fits = local_size <= cores;
  const bool bind = bind_to == BindTo::kCore || (bind_to == BindTo::kAuto && fits && local_size > 1);
  if (bind && fits) {
    for (int i = 0; i < share; ++i) p.cpus.push_back(cpus[local_rank * share + i]);
  } else if (bind) {
    p.cpus.push_back(cpus[local_rank % cores]);  // oversubscribed: round robin
  }
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

void apply_placement(const Placement& p) {
  at::set_num_threads(p.intra_op_threads);
  if (p.cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : p.cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    log(LogLevel::kWarning, "could not bind to cpus {}: {}", fmt::join(p.cpus, ","),
        std::strerror(errno));
  else
    bound_by_placement = true;
}

Placement place_this_worker(int local_rank, int local_size) {
  BindTo bind_to = parse_bind_to(knob_string("LOCKSTEP_BIND_TO"));
  int threads = static_cast<int>(knob_int("LOCKSTEP_INTRA_OP_THREADS"));
  Placement p = plan_placement(local_rank, local_size, allowed_cpus(), bind_to, threads);
  apply_placement(p);
  log(LogLevel::kInfo, "placement: {}", p.describe());
  return p;
}

int worker_cpu_count(int local_size) {
  const int allowed = std::max<int>(1, static_cast<int>(allowed_cpus().size()));
  if (bound_by_placement.load()) return allowed;  // the set is this worker's own
  return std::max(1, allowed / std::max(1, local_size));
}

bool overlap_pays(bool one_host, int worker_cpus, int intra_op_threads) {
  return !one_host || worker_cpus > intra_op_threads;
}

void tune_malloc() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
}

}  // namespace lockstep::torch
