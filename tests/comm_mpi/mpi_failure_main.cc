// Failure injection under mpirun (driven by failure_test.sh, 3 ranks):
//   kill:   rank 2 SIGKILLs itself during a stream of 16 MiB allreduces;
//   absent: rank 2 never joins the allreduce (LOCKSTEP_TIMEOUT=1);
//   mismatch: rank 2 calls broadcast while ranks 0 and 1 call allreduce (no
//             LOCKSTEP_VERIFY_OPS): the watchdog compares the descriptors
//             local peers publish and fails with MismatchError.
// Each survivor prints "SURVIVOR OK rank R" when it got the expected error,
// naming rank 2, within the bound; the script checks both lines. The process
// then ends with MPI_Abort (the failed request can never complete), which is
// the documented behaviour.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/comm/communicator.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

comm::WorldInfo mpi_world() {
  comm::WorldInfo w;
  w.rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  w.size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  w.local_rank = w.rank;
  w.local_size = w.size;
  return w;
}

void report(int rank, bool ok, const std::string& detail) {
  std::printf("SURVIVOR %s rank %d: %s\n", ok ? "OK" : "FAIL", rank, detail.c_str());
  std::fflush(stdout);
  // Let the other survivor report before this one's exit aborts the job.
  std::this_thread::sleep_for(std::chrono::seconds(2));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "kill";
  if (mode == "absent") setenv("LOCKSTEP_TIMEOUT", "1", 1);
  auto c = comm::Communicator::create(mpi_world(), "mpi");
  c->barrier();
  auto start = Clock::now();
  if (c->rank() == 2) {
    if (mode == "kill") {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        kill(getpid(), SIGKILL);
      }).detach();
    } else if (mode == "absent") {
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return 0;
    }
  }
  if (mode == "mismatch") {
    std::vector<float> v(1000, 1.0f);
    try {
      if (c->rank() == 2)
        c->broadcast(v.data(), v.size(), comm::DataType::kFloat32, 0);
      else
        c->allreduce(v.data(), v.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum);
      if (c->rank() != 2) report(c->rank(), false, "mismatched collectives returned");
    } catch (const MismatchError& e) {
      std::string what = e.what();
      bool named = what.find("broadcast") != std::string::npos &&
                   what.find("allreduce") != std::string::npos;
      double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (c->rank() != 2)
        report(c->rank(), named && s < 5, fmt::format("after {:.2f} s: {}", s, what));
      else
        std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return 0;
  }
  std::vector<float> data(4 << 20, 1.0f);
  try {
    for (;;) c->allreduce(data.data(), data.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum);
  } catch (const Error& e) {
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::string what = e.what();
    bool named = what.find("rank 2") != std::string::npos;
    bool kind = mode == "kill" ? dynamic_cast<const PeerFailure*>(&e) != nullptr
                               : dynamic_cast<const TimeoutError*>(&e) != nullptr;
    double bound = mode == "kill" ? 5.3 : 6.0;
    report(c->rank(), named && kind && s < bound, fmt::format("after {:.2f} s: {}", s, what));
  }
  return 0;
}
