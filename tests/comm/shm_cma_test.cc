// The shm transport's single-copy (CMA) allreduce of two ranks (Note
// [Single-copy allreduce] in src/comm/transport/shm/shm_cma.cc), in real
// worker processes: bitwise against the rank-order scalar reference around
// the size cut-off, in place and not, for several dtypes and ops; the switch
// (LOCKSTEP_SHM_CMA, off by default); the fallback when only one rank may
// use CMA; and ranks configured differently.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "comm/transport/shm/cma.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/communicator.h"
#include "support/multiproc.h"
#include "support/typed_data.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;

constexpr size_t kCutOff = 64 * 1024;  // LOCKSTEP_SHM_CMA_BYTES in these tests

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
};

// Element counts just below, at and above the cut-off, an odd count that
// splits unevenly, and one of several 256 KiB staging pieces.
std::vector<Case> cases() {
  std::vector<Case> all;
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                             DataType::kFloat64, DataType::kInt8,    DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                          ReduceOp::kAverage};
  for (DataType dt : dtypes) {
    size_t at = kCutOff / comm::dtype_size(dt);
    for (ReduceOp op : ops)
      for (size_t count : {at - 1, at, at + 1, 3 * at + 7, size_t{300'001}})
        all.push_back({dt, op, count});
  }
  return all;
}

// Runs every case on `c` and returns how many of its allreduces should have
// been large enough for the single-copy path.
uint64_t allreduce_cases(Communicator& c) {
  uint64_t eligible = 0;
  int salt = 0;
  for (const Case& k : cases()) {
    ++salt;
    auto in = make_input(k.dtype, k.op, k.count, c.rank(), salt);
    auto want = reference_reduce(k.dtype, k.op, 0, k.count, k.count, c.size(), salt);
    std::vector<uint8_t> got;
    if (salt % 2) {
      c.allreduce(in.data(), k.count, k.dtype, k.op);
      got = in;
    } else {
      got.resize(in.size());
      c.allreduce(in.data(), got.data(), k.count, k.dtype, k.op);
    }
    long diff = first_difference(got, want, comm::dtype_size(k.dtype));
    EXPECT_EQ(diff, -1) << comm::dtype_name(k.dtype) << " " << comm::reduce_op_name(k.op)
                        << " count=" << k.count << (salt % 2 ? " in place" : "");
    eligible += in.size() >= kCutOff;
  }
  return eligible;
}

MultiProcOptions with_env(std::map<std::string, std::string> env) {
  MultiProcOptions options;
  env.emplace("LOCKSTEP_SHM_CMA", "on");
  env["LOCKSTEP_SHM_CMA_BYTES"] = "64KiB";
  options.env = std::move(env);
  return options;
}

TEST(ShmSingleCopy, BitwiseAgainstTheReferenceAroundTheCutOff) {
  expect_all_ok(run_workers(
      2,
      [](Communicator& c) {
        uint64_t before = comm::shm::cma_allreduces();
        uint64_t eligible = allreduce_cases(c);
        EXPECT_GT(eligible, 0u);
        EXPECT_EQ(comm::shm::cma_allreduces() - before, eligible)
            << "every allreduce at or above the cut-off takes the single-copy path";
      },
      with_env({})));
}

// Off is the default (the staged path measured faster here) and the switch.
TEST(ShmSingleCopy, SwitchOffTakesTheStagedPath) {
  expect_all_ok(run_workers(
      2,
      [](Communicator& c) {
        uint64_t before = comm::shm::cma_allreduces();
        allreduce_cases(c);
        EXPECT_EQ(comm::shm::cma_allreduces(), before);
      },
      with_env({{"LOCKSTEP_SHM_CMA", "off"}})));
}

// Makes process_vm_readv fail with EPERM in this process only, as a
// container's seccomp profile would.
void forbid_cma() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  ASSERT_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  ASSERT_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

// Rank 1 cannot read rank 0 but rank 0 can read rank 1: both must agree on
// the staged path, or each would wait on a different protocol.
TEST(ShmSingleCopy, OneRankWithoutCmaSendsBothToTheStagedPath) {
  expect_all_ok(run_workers_raw(
      2,
      [](const comm::WorldInfo& world) {
        if (world.rank == 1) forbid_cma();
        auto c = Communicator::create(world, "shm");
        uint64_t before = comm::shm::cma_allreduces();
        allreduce_cases(*c);
        EXPECT_EQ(comm::shm::cma_allreduces(), before);
        c->barrier();
      },
      with_env({})));
}

// Only rank 0 turns the path on: every rank fails the call with an error
// naming the knobs (instead of each following its own protocol), and the
// communicator stays usable.
TEST(ShmSingleCopy, SwitchOnOneRankOnlyFailsEveryRankNamingTheKnob) {
  expect_all_ok(run_workers_raw(
      2,
      [](const comm::WorldInfo& world) {
        setenv("LOCKSTEP_SHM_CMA", world.rank == 0 ? "on" : "off", 1);
        auto c = Communicator::create(world, "shm");
        std::vector<float> big(kCutOff / sizeof(float), 1.0f);
        try {
          c->allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
          ADD_FAILURE() << "rank " << world.rank << ": the allreduce did not fail";
        } catch (const MismatchError& e) {
          EXPECT_NE(std::string(e.what()).find("LOCKSTEP_SHM_CMA"), std::string::npos) << e.what();
        }
        float one = 1.0f;
        c->allreduce(&one, 1, DataType::kFloat32, ReduceOp::kSum);
        EXPECT_EQ(one, 2.0f);
      },
      with_env({})));
}

}  // namespace
}  // namespace lockstep::testing
