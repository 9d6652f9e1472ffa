// Cross Memory Attach: reading a peer process's memory with one copy
// (process_vm_readv), for the shm transport's single-copy allreduce
// (Note [Single-copy allreduce] in shm_cma.cc). Stateless functions; the
// counter is process-wide and atomic.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::comm::shm {

// Copies `bytes` from address `remote` in process `pid` to `local`, looping
// over short reads. Returns 0, or the errno of the failing call (EPERM when
// ptrace is forbidden, ENOSYS without CMA, ESRCH for a pid in another
// namespace, EFAULT for an unmapped address).
int cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes);

// Under Yama's restricted ptrace (kernel/yama/ptrace_scope = 1) only a
// declared ptracer may read us: declare `peer`. Other scopes and kernels
// without Yama need nothing (scope 2-3 forbid it; the probe then fails).
void allow_reads_by(pid_t peer);

// Allreduces this process ran on the single-copy path (for tests).
uint64_t cma_allreduces();
void count_cma_allreduce();

}  // namespace lockstep::comm::shm
