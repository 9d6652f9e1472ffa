// A worker for end-to-end tests of `lockstep run`: connects through the
// environment the launcher provides and runs allreduces; optionally one rank
// kills itself with SIGKILL mid-way.
//
//   lockstep-test-worker [--die-rank R] [--die-after-ms T] [--iterations N] [--mib M]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/comm/communicator.h"

int main(int argc, char** argv) {
  int die_rank = -1, die_after_ms = 200, iterations = 20, mib = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--die-rank")
      die_rank = value;
    else if (flag == "--die-after-ms")
      die_after_ms = value;
    else if (flag == "--iterations")
      iterations = value;
    else if (flag == "--mib")
      mib = value;
    else {
      std::fprintf(stderr, "test-worker: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  try {
    auto comm = lockstep::comm::Communicator::from_environment();
    if (comm->rank() == 0)
      std::printf("job=%s size=%d\n", std::getenv("LOCKSTEP_JOB_ID"), comm->size());
    std::fflush(stdout);
    if (comm->rank() == die_rank)
      std::thread([die_after_ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(die_after_ms));
        kill(getpid(), SIGKILL);
      }).detach();
    std::vector<float> data(static_cast<size_t>(mib) << 18, 1.0f);
    bool forever = die_rank >= 0;
    for (int it = 0; forever || it < iterations; ++it)
      comm->allreduce(data.data(), data.size(), lockstep::comm::DataType::kFloat32,
                      lockstep::comm::ReduceOp::kSum);
    comm->barrier();
    std::printf("rank %d done\n", comm->rank());
    return 0;
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "test-worker: %s\n", e.what());
    return 3;
  }
}
