// What one process_vm_readv (CMA) costs against a user-space copy of the same
// bytes, between two processes pinned to CPUs 0 and 1: the measurement that
// decides whether the shm transport's single-copy allreduce pays
// (LOCKSTEP_SHM_CMA; docs/performance.md, "The mid-size allreduce").
//
//   lockstep-cma-cost [--max-bytes 8388608] [--repeats 5]
//
// Per size: the best of `repeats` timings of a loop of CMA reads of the
// child's buffer and of memcpy from a shared mapping the child wrote. Prints
// a table and one JSON line per size.
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: fewer CPUs just share
}

template <typename F>
double best_seconds_per_call(int repeats, int iters, F&& call) {
  double best = 1e30;
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now();
    for (int i = 0; i < iters; ++i) call();
    best = std::min(best, (now() - t0) / iters);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = 8u << 20;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--max-bytes")
      max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "lockstep-cma-cost: unknown argument %s (--max-bytes N, --repeats N)\n",
                   argv[i]);
      return 2;
    }
  }
  // The child's private buffer (read by CMA), a shared copy of it (read by
  // memcpy) and a flag telling the child to exit.
  auto* shared = static_cast<std::byte*>(
      mmap(nullptr, max_bytes + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* src = static_cast<std::byte*>(std::aligned_alloc(4096, max_bytes));
  auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, max_bytes));
  if (shared == MAP_FAILED || !src || !dst) {
    std::perror("lockstep-cma-cost: allocation");
    return 1;
  }
  auto* done = new (shared + max_bytes) std::atomic<int>(0);
  pid_t child = fork();
  if (child == 0) {
    pin(1);
    std::memset(src, 1, max_bytes);  // the child's own pages, written on its core
    std::memset(shared, 1, max_bytes);
    done->store(1);
    while (done->load() != 2) usleep(1000);
    _exit(0);
  }
  pin(0);
  std::memset(dst, 0, max_bytes);
  while (done->load() != 1) usleep(100);
  std::printf("# process_vm_readv vs memcpy, best of %d; GB/s = bytes / time\n", repeats);
  std::printf("%10s %10s %10s %10s %10s\n", "bytes", "cma us", "memcpy us", "cma GB/s", "cpy GB/s");
  int rc = 0;
  for (size_t b = 8; b <= max_bytes; b *= 4) {
    int iters = static_cast<int>(std::clamp<size_t>((64u << 20) / b, 20, 20000));
    iovec local{dst, b}, remote{src, b};
    double cma = best_seconds_per_call(repeats, iters, [&] {
      if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(b)) rc = 1;
    });
    double cpy = best_seconds_per_call(repeats, iters, [&] {
      std::memcpy(dst, shared, b);
      asm volatile("" ::: "memory");
    });
    if (rc) {
      std::perror("lockstep-cma-cost: process_vm_readv (ptrace not allowed here?)");
      break;
    }
    std::printf("%10zu %10.3f %10.3f %10.2f %10.2f\n", b, cma * 1e6, cpy * 1e6, b / cma / 1e9,
                b / cpy / 1e9);
    std::printf(
        "{\"bytes\":%zu,\"cma_us\":%.3f,\"memcpy_us\":%.3f,\"cma_gbps\":%.3f,"
        "\"memcpy_gbps\":%.3f}\n",
        b, cma * 1e6, cpy * 1e6, b / cma / 1e9, b / cpy / 1e9);
  }
  done->store(2);
  waitpid(child, nullptr, 0);
  return rc;
}
