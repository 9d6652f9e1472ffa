// lockstep's shared-memory allreduce against Open MPI's MPI_Allreduce, in
// one program under `mpirun -np N`, interleaved per size: the two libraries
// and a memory-traffic bound take turns within each round, so a change in
// machine load between them cannot pass for a difference between them
// (on a shared VM the speed drifts 2x within minutes). bench/compare_mpi.sh
// runs it.
//
// Every iteration first rewrites the input with new values (data-varying,
// untimed), as training rewrites its gradients, so neither side is timed on
// data the previous call left in its caches; the lockstep result is checked
// against the exact sum once per size. The bound: every rank copies N bytes
// (memcpy, after a barrier, all ranks at once); an allreduce must at least
// read its N input bytes and write N output bytes per rank, so N / that
// time is the best busbw the memory system allows here.
//
// Prints one table line and one JSON line per size (rank 0).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/base/knobs.h"
#include "lockstep/comm/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace comm = lockstep::comm;

struct Options {
  size_t lo = 8, hi = 256u << 20;
  int rounds = 3;
  double seconds = 0.1;  // per size, per library, per round
  bool rewrite = true;   // --rewrite 0: time on the same input (cache-flattered)
  bool barrier = false;  // --barrier 1: a barrier before each timed call (no skew)
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--sizes") {
      auto c = v.find(':');
      o.lo = lockstep::parse_bytes(v.substr(0, c), "--sizes");
      o.hi = c == std::string::npos ? o.lo : lockstep::parse_bytes(v.substr(c + 1), "--sizes");
    } else if (k == "--rounds") {
      o.rounds = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--rewrite") {
      o.rewrite = v != "0";
    } else if (k == "--barrier") {
      o.barrier = v != "0";
    } else if (k == "--seconds") {
      o.seconds = std::atof(v.c_str());
    } else {
      std::fprintf(stderr,
                   "compare_mpi: unknown option %s (--sizes A:B --rounds R --seconds S "
                   "--rewrite 0|1 --barrier 0|1)\n",
                   k.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  return o;
}

// The same job id on every rank, for lockstep's shared-memory segment.
comm::WorldInfo lockstep_world(int rank, int size) {
  comm::WorldInfo w;
  w.rank = w.local_rank = rank;
  w.size = w.local_size = size;
  char id[64] = {0};
  if (rank == 0) std::snprintf(id, sizeof id, "compare-mpi-%d-%ld", getpid(), random());
  MPI_Bcast(id, sizeof id, MPI_CHAR, 0, MPI_COMM_WORLD);
  w.job_id = id;
  return w;
}

struct Buffers {
  std::vector<float> in, out;
  int rank;
  bool enabled = true;
  float stamp = 0;
  // New values every iteration: rank r holds (r + 1) * stamp everywhere but
  // element 0 carries the iteration, so results differ between calls.
  void rewrite() {
    if (!enabled && stamp != 0) return;
    stamp = stamp >= 1000 ? 1 : stamp + 1;
    std::fill(in.begin(), in.end(), static_cast<float>(rank + 1) * stamp);
  }
};

// Times `iters` calls of `op` after an untimed rewrite each; returns
// per-iteration microseconds, the slowest rank's.
std::vector<double> timed(Buffers& b, long iters, bool barrier_first,
                          const std::function<void()>& op) {
  std::vector<double> t(static_cast<size_t>(iters));
  for (auto& x : t) {
    b.rewrite();
    if (barrier_first) MPI_Barrier(MPI_COMM_WORLD);
    auto s = Clock::now();
    op();
    x = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
  }
  MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o = parse(argc, argv);
  auto shm = comm::Communicator::create(lockstep_world(rank, size), "shm");
  const double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  if (rank == 0)
    std::printf(
        "# allreduce f32 sum, %d ranks, %d interleaved rounds, medians; busbw in GB/s; ratio: median of the rounds' lockstep/mpi busbw\n"
        "%10s %12s %12s %10s %10s %9s %11s %10s %9s\n",
        size, o.rounds, "bytes", "lockstep us", "mpi us", "lockstep", "mpi", "ratio", "rounds",
        "bound", "of bound");
  bool all_ok = true;
  for (size_t bytes = std::max<size_t>(o.lo, 4); bytes <= o.hi; bytes *= 2) {
    const size_t count = bytes / 4;
    Buffers b{std::vector<float>(count), std::vector<float>(count), rank, o.rewrite};
    auto ls = [&] {
      shm->allreduce(b.in.data(), b.out.data(), count, comm::DataType::kFloat32,
                     comm::ReduceOp::kSum);
    };
    auto mpi = [&] {
      MPI_Allreduce(b.in.data(), b.out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    auto copy = [&] { std::memcpy(b.out.data(), b.in.data(), bytes); };
    // Correctness of this size, and warm-up of both.
    b.rewrite();
    ls();
    const float want = static_cast<float>(size * (size + 1) / 2) * b.stamp;
    int bad = std::any_of(b.out.begin(), b.out.end(), [&](float x) { return x != want; }) ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    all_ok &= bad == 0;
    for (int i = 0; i < 3; ++i) ls(), mpi();
    // Rank 0 picks one iteration count for every rank and library.
    auto t0 = Clock::now();
    for (int i = 0; i < 3; ++i) b.rewrite(), ls();
    double per = std::chrono::duration<double>(Clock::now() - t0).count() / 3;
    long iters = std::clamp<long>(static_cast<long>(o.seconds / std::max(per, 1e-9)), 5, 20000);
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    std::vector<double> l_med, m_med, c_med;
    for (int r = 0; r < o.rounds; ++r) {
      // Alternate which library goes first.
      if (r % 2 == 0) {
        l_med.push_back(median(timed(b, iters, o.barrier, ls)));
        m_med.push_back(median(timed(b, iters, o.barrier, mpi)));
      } else {
        m_med.push_back(median(timed(b, iters, o.barrier, mpi)));
        l_med.push_back(median(timed(b, iters, o.barrier, ls)));
      }
      c_med.push_back(median(timed(b, std::min(iters, 200L), true, copy)));
    }
    const double l_us = median(l_med), m_us = median(m_med), c_us = median(c_med);
    // The ratio is the median of the rounds' own ratios: a burst of the
    // host's slow state that hits one library's block of one round moves
    // that round only (docs/performance.md, "The VM switches between two
    // speeds"); min and max say how far the rounds spread.
    std::vector<double> ratios;
    for (size_t r = 0; r < l_med.size(); ++r) ratios.push_back(m_med[r] / l_med[r]);
    const double ratio = median(ratios);
    const auto [rmin, rmax] = std::minmax_element(ratios.begin(), ratios.end());
    const double l_bw = bytes / (l_us * 1e3) * bus, m_bw = bytes / (m_us * 1e3) * bus;
    const double bound = bytes / (c_us * 1e3) * bus;
    if (rank == 0) {
      std::printf("%10zu %12.2f %12.2f %10.3f %10.3f %9.2f %5.2f-%-5.2f %10.3f %8.0f%%%s\n", bytes,
                  l_us, m_us, l_bw, m_bw, ratio, *rmin, *rmax, bound, 100 * l_bw / bound,
                  bad ? "  WRONG" : "");
      std::printf(
          "{\"bytes\":%zu,\"lockstep_median_us\":%.3f,\"mpi_median_us\":%.3f,"
          "\"lockstep_busbw_gbps\":%.4f,\"mpi_busbw_gbps\":%.4f,\"busbw_ratio\":%.4f,"
          "\"busbw_ratio_min\":%.4f,\"busbw_ratio_max\":%.4f,"
          "\"bound_busbw_gbps\":%.4f,\"share_of_bound\":%.4f,\"check\":%s}\n",
          bytes, l_us, m_us, l_bw, m_bw, ratio, *rmin, *rmax, bound, l_bw / bound,
          bad ? "false" : "true");
      std::fflush(stdout);
    }
  }
  shm.reset();
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
