#include "launcher/local_limits.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::launcher {
namespace {

// Launcher descriptors per worker: stdout and stderr pipes, its rendezvous
// connection, a remote worker's launch pipe; plus a reserve for the store,
// the signalfd and the standard streams.
constexpr rlim_t kFilesPerWorker = 4;
constexpr rlim_t kFileReserve = 64;

int allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void check_open_files(int total_workers) {
  const rlim_t needed = kFileReserve + kFilesPerWorker * static_cast<rlim_t>(total_workers);
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= needed) return;
  if (files.rlim_max == RLIM_INFINITY || files.rlim_max >= needed) {
    files.rlim_cur = needed;
    if (::setrlimit(RLIMIT_NOFILE, &files) == 0) return;
  }
  throw InvalidArgument(fmt::format(
      "-np {}: the launcher needs about {} open files but this process may open only {} (ulimit "
      "-n; hard limit {}); raise the limit or lower -np",
      total_workers, needed, files.rlim_cur, files.rlim_max));
}

// Only a bound: the user's other processes count against the limit too.
void check_processes(int local_workers) {
  rlimit procs{};
  if (::geteuid() == 0 || ::getrlimit(RLIMIT_NPROC, &procs) != 0) return;
  if (procs.rlim_cur == RLIM_INFINITY || procs.rlim_cur > static_cast<rlim_t>(local_workers))
    return;
  throw InvalidArgument(fmt::format(
      "-np {}: this user may run only {} processes (ulimit -u); raise the limit or lower -np",
      local_workers, procs.rlim_cur));
}

}  // namespace

int local_worker_limit() {
  return std::max(kMinLocalWorkerLimit, kWorkersPerCpu * allowed_cpu_count());
}

void check_worker_count(int local_workers, int total_workers) {
  const int limit = local_worker_limit();
  if (local_workers > limit)
    throw InvalidArgument(fmt::format(
        "-np {}: at most {} workers may run on this host ({} per CPU, {} CPUs); spread the job "
        "over hosts with -H/--hostfile or lower -np",
        local_workers, limit, kWorkersPerCpu, allowed_cpu_count()));
  check_processes(local_workers);
  check_open_files(total_workers);
}

}  // namespace lockstep::launcher
