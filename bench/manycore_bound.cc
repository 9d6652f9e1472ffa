// The memory-traffic bound for bench/manycore.sh: `np` threads each copy N
// bytes (memcpy, all at once, after a barrier), as in bench/compare_mpi.cc.
// An allreduce must at least read its N input bytes and write N output bytes
// per rank, so N / that time is the best busbw (x bus factor) the memory
// system allows for that many ranks. Data is rewritten before every copy.
//
//   manycore_bound NP BYTES...   prints {"np":..,"bytes":..,"copy_us":..} per size
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: manycore_bound NP BYTES...\n");
    return 2;
  }
  const int np = std::atoi(argv[1]);
  for (int a = 2; a < argc; ++a) {
    const size_t bytes = std::strtoull(argv[a], nullptr, 10);
    constexpr int kRounds = 7;
    std::vector<double> per_round(kRounds);
    std::barrier sync(np);
    std::vector<std::thread> threads;
    for (int t = 0; t < np; ++t)
      threads.emplace_back([&, t] {
        std::vector<char> src(bytes), dst(bytes);
        for (int r = 0; r < kRounds; ++r) {
          std::memset(src.data(), r + t, bytes);  // untimed rewrite
          sync.arrive_and_wait();
          auto start = std::chrono::steady_clock::now();
          std::memcpy(dst.data(), src.data(), bytes);
          sync.arrive_and_wait();
          if (t == 0)
            per_round[r] =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count();
        }
      });
    for (auto& th : threads) th.join();
    std::sort(per_round.begin(), per_round.end());
    std::printf("{\"np\":%d,\"bytes\":%zu,\"copy_us\":%.3f}\n", np, bytes, per_round[kRounds / 2]);
  }
  return 0;
}
