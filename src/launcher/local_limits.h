// How many workers this host can start, checked before the first fork so
// that `-np 99999` fails at once with a reason instead of after thousands of
// forks. Internal.
#pragma once

namespace lockstep::launcher {

// Workers per CPU beyond which a job on one host is refused: far past any
// useful oversubscription, yet low enough that a typo cannot fork-bomb the
// machine. At least kMinLocalWorkerLimit in total.
inline constexpr int kWorkersPerCpu = 16;
inline constexpr int kMinLocalWorkerLimit = 64;

// The most workers this host may start: kWorkersPerCpu per CPU this process
// may run on, at least kMinLocalWorkerLimit.
int local_worker_limit();

// Checks `local_workers` against local_worker_limit() and `total_workers`
// (the launcher holds pipes for every worker, remote ones too) against the
// open-file limit, raising the soft RLIMIT_NOFILE up to the hard one when
// that suffices. Throws InvalidArgument naming -np, the limit and how to
// lift it.
void check_worker_count(int local_workers, int total_workers);

}  // namespace lockstep::launcher
