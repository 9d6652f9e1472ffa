// The NCCL backend on a GPU (built only with LOCKSTEP_WITH_CUDA; skipped
// where no GPU is visible): the shared collective matrix through host
// staging, every dtype/op/count of allreduce on device buffers in deferred
// mode, argument and device checks, a deadline, and the two-rank cases
// (skipped with fewer than two GPUs: NCCL takes one GPU per rank).
//
// Every GPU body runs in a forked worker (support/multiproc.h), never in
// this process: CUDA does not survive a fork once initialised, and the
// two-rank tests fork.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/backend_factory.h"
#include "comm_nccl/staged_backend.h"
#include "lockstep/base/error.h"
#include "support/collective_matrix.h"
#include "support/mismatch_matrix.h"
#include "support/multiproc.h"
#include "support/typed_data.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DeviceMemory;

// GPUs visible to a fresh process, asked in a child so that this process
// never initialises CUDA.
int visible_gpus() {
  static const int count = [] {
    pid_t pid = fork();
    if (pid == 0) {
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
      _exit(std::min(n, 100));
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
  }();
  return count;
}

#define LOCKSTEP_REQUIRE_GPUS(n)                                                         \
  if (visible_gpus() < (n))                                                              \
  GTEST_SKIP() << "needs " << (n) << " visible CUDA device(s), found " << visible_gpus() \
               << (n > 1 ? " (NCCL refuses two ranks on one GPU)" : "")

// The nccl backend for `w` on GPU `device` (what the placement does first).
std::unique_ptr<comm::Backend> nccl_backend(const comm::WorldInfo& w, int device) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  return comm::make_backend("nccl", w, "w");
}

MultiProcOptions options() {
  MultiProcOptions o;
  o.backend = "nccl";
  o.deadline = std::chrono::seconds(280);
  return o;
}

// --- The shared matrix, through host staging -----------------------------

class NcclCollectives : public ::testing::TestWithParam<int> {
 protected:
  void run(void (*body)(Communicator&)) {
    LOCKSTEP_REQUIRE_GPUS(GetParam());
    expect_all_ok(run_workers_raw(
        GetParam(),
        [&](const comm::WorldInfo& w) {
          auto inner = nccl_backend(w, w.rank);
          ASSERT_EQ(inner->memory(), comm::MemoryKind::kCuda);
          Communicator c(w, std::make_unique<StagedBackend>(std::move(inner)));
          ASSERT_EQ(c.backend_name(), "nccl");
          // One rank: NCCL copies, so every result is exact.
          matrix::require_bitwise_reductions(w.size == 1);
          matrix::skip_dtype(comm::DataType::kInt16);  // NCCL has no int16 (InvalidArgument)
          body(c);
        },
        options()));
  }
};

TEST_P(NcclCollectives, AllreduceEveryDtypeOpAndCount) {
  run(matrix::allreduce_every_dtype_op_and_count);
}
TEST_P(NcclCollectives, ReduceToEveryRoot) { run(matrix::reduce_to_every_root); }
TEST_P(NcclCollectives, BroadcastFromEveryRoot) { run(matrix::broadcast_from_every_root); }
TEST_P(NcclCollectives, AllgatherAndAllgatherv) { run(matrix::allgather_and_allgatherv); }
TEST_P(NcclCollectives, GatherAndScatterEveryRoot) { run(matrix::gather_and_scatter_every_root); }
TEST_P(NcclCollectives, ReduceScatterEveryDtypeAndOp) {
  run(matrix::reduce_scatter_every_dtype_and_op);
}
TEST_P(NcclCollectives, AlltoallAndAlltoallv) { run(matrix::alltoall_and_alltoallv); }
TEST_P(NcclCollectives, SendRecvRingAndBarrier) { run(matrix::send_recv_ring_and_barrier); }

// split() over an NCCL communicator: the subset's id travels over the
// parent (NcclBackend::subset); its collectives take device buffers too.
TEST_P(NcclCollectives, SplitGivesADeviceSubsetCommunicator) {
  LOCKSTEP_REQUIRE_GPUS(GetParam());
  expect_all_ok(run_workers_raw(
      GetParam(),
      [](const comm::WorldInfo& w) {
        Communicator c(w, nccl_backend(w, w.rank));
        std::vector<int> evens;
        for (int r = 0; r < c.size(); r += 2) evens.push_back(r);
        if (c.rank() % 2 == 0) {
          auto sub = c.split(evens, "evens");
          ASSERT_EQ(sub->size(), static_cast<int>(evens.size()));
          ASSERT_EQ(sub->memory(), comm::MemoryKind::kCuda);
          DeviceMemory& dm = *sub->device_memory();
          auto* d = static_cast<int64_t*>(dm.allocate(sizeof(int64_t)));
          int64_t v = c.rank() + 1, total = 0, want = 0;
          for (int r : evens) want += r + 1;
          dm.copy(d, &v, sizeof v);
          sub->allreduce(d, 1, comm::DataType::kInt64, comm::ReduceOp::kSum);
          dm.copy(&total, d, sizeof total);
          dm.synchronize();
          EXPECT_EQ(total, want);
          dm.free(d);
        }
        c.barrier();
      },
      options()));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, NcclCollectives, ::testing::Values(1, 2),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

// --- Device buffers directly ---------------------------------------------

std::vector<uint8_t> to_host(DeviceMemory& dm, const void* p, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (bytes) dm.copy(out.data(), p, bytes);
  return out;
}

// Allreduce of every dtype x op at 0, 1, 7 and 2^20 elements on device
// buffers, out of place into poisoned outputs and in place, all enqueued in
// deferred mode and synchronised once per dtype, against typed_data's
// scalar reference.
TEST(NcclDevice, DeferredAllreduceEveryDtypeOpAndCount) {
  LOCKSTEP_REQUIRE_GPUS(1);
  expect_all_ok(run_workers_raw(
      1,
      [](const comm::WorldInfo& w) {
        auto b = nccl_backend(w, 0);
        DeviceMemory& dm = *b->device_memory();
        dm.set_deferred(true);
        const size_t counts[] = {0, 1, 7, size_t{1} << 20};
        const comm::ReduceOp ops[] = {comm::ReduceOp::kSum, comm::ReduceOp::kAverage,
                                      comm::ReduceOp::kMin, comm::ReduceOp::kMax,
                                      comm::ReduceOp::kProduct};
        int salt = 0;
        for (int d = 0; d < comm::kNumDataTypes; ++d) {
          auto dt = static_cast<comm::DataType>(d);
          if (dt == comm::DataType::kInt16) continue;  // NCCL has no int16
          struct Case {
            void* in;
            void* out;
            size_t bytes;
            std::vector<uint8_t> want;
            std::string what;
          };
          std::vector<Case> cases;
          for (auto op : ops)
            for (size_t count : counts) {
              ++salt;
              size_t bytes = count * comm::dtype_size(dt);
              auto host = make_input(dt, op, count, 0, salt);
              Case c{dm.allocate(bytes), dm.allocate(bytes), bytes,
                     reference_reduce(dt, op, 0, count, count, 1, salt),
                     fmt::format("allreduce {} {} count={}", comm::dtype_name(dt),
                                 comm::reduce_op_name(op), count)};
              if (bytes) dm.copy(c.in, host.data(), bytes);
              poison(dm, c.out, bytes);
              b->allreduce(c.in, c.out, count, dt, op);
              b->allreduce(c.in, c.in, count, dt, op);  // in place, after the copy out
              cases.push_back(std::move(c));
            }
          dm.synchronize();
          const size_t es = comm::dtype_size(dt);
          for (auto& c : cases) {
            EXPECT_EQ(first_difference(to_host(dm, c.out, c.bytes), c.want, es), -1) << c.what;
            EXPECT_EQ(first_difference(to_host(dm, c.in, c.bytes), c.want, es), -1)
                << c.what << " in place";
            dm.free(c.in);
            dm.free(c.out);
          }
        }
      },
      options()));
}

TEST(NcclDevice, HostBufferIsRefusedNamingTheOp) {
  LOCKSTEP_REQUIRE_GPUS(1);
  expect_all_ok(run_workers_raw(
      1,
      [](const comm::WorldInfo& w) {
        Communicator c(w, nccl_backend(w, 0));
        std::vector<float> host(16, 1.0f);
        try {
          c.allreduce(host.data(), host.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum);
          ADD_FAILURE() << "a host buffer was accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
        }
        // Still usable: the check ran before anything was enqueued.
        c.barrier();
      },
      options()));
}

// The engine calls from its own thread, whose current device CUDA
// defaults to 0: the backend makes its own device current and restores it.
TEST(NcclDevice, CallsFromAnotherThreadUseTheBackendsDevice) {
  LOCKSTEP_REQUIRE_GPUS(1);
  expect_all_ok(run_workers_raw(
      1,
      [](const comm::WorldInfo& w) {
        int gpus = 0;
        ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
        const int mine = gpus - 1;  // not the thread default when there are several
        auto b = nccl_backend(w, mine);
        DeviceMemory& dm = *b->device_memory();
        EXPECT_EQ(dm.device(), mine);
        std::thread engine([&] {
          int before = -1, after = -1;
          ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
          int64_t* d = static_cast<int64_t*>(dm.allocate(8 * sizeof(int64_t)));
          std::vector<int64_t> v(8, 21), out(8, 0);
          dm.copy(d, v.data(), 8 * sizeof(int64_t));
          b->allreduce(d, d, 8, comm::DataType::kInt64, comm::ReduceOp::kSum);
          dm.copy(out.data(), d, 8 * sizeof(int64_t));
          dm.synchronize();
          EXPECT_EQ(out, v);
          cudaPointerAttributes attr{};
          ASSERT_EQ(cudaPointerGetAttributes(&attr, d), cudaSuccess);
          EXPECT_EQ(attr.device, mine);
          dm.free(d);
          ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
          EXPECT_EQ(after, before) << "the backend left its device current in the caller's thread";
        });
        engine.join();
      },
      options()));
}

void sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
}

// A stream that cannot finish within LOCKSTEP_TIMEOUT (held by a host
// callback here; a peer that never joins in a real job) ends in
// TimeoutError naming the oldest pending operation, then Aborted.
TEST(NcclDevice, DeadlineNamesTheOperationAndHowLongItWaited) {
  LOCKSTEP_REQUIRE_GPUS(1);
  MultiProcOptions o = options();
  o.env["LOCKSTEP_TIMEOUT"] = "1";
  expect_all_ok(run_workers_raw(
      1,
      [](const comm::WorldInfo& w) {
        auto b = nccl_backend(w, 0);
        DeviceMemory& dm = *b->device_memory();
        void* d = dm.allocate(64);
        auto stream = static_cast<cudaStream_t>(dm.stream());
        ASSERT_EQ(cudaLaunchHostFunc(stream, sleep_on_stream, reinterpret_cast<void*>(3000)),
                  cudaSuccess);
        dm.fill_zero(d, 64);
        try {
          dm.synchronize();
          ADD_FAILURE() << "synchronize returned while the stream was held for 3 s";
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("fill_zero"), std::string::npos) << m;
          EXPECT_NE(m.find("did not complete within 1."), std::string::npos) << m;
        }
        EXPECT_THROW(b->barrier(), Aborted);
      },
      o));
}

// Where no GPU is visible (a CUDA build on a CPU machine), asking for the
// backend fails at once with InvalidArgument naming the reason and the way
// out, never later inside NCCL.
TEST(NcclNoGpu, CreationFailsNamingTheReason) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible; this case is for machines without";
  expect_all_ok(run_workers_raw(
      1,
      [](const comm::WorldInfo& w) {
        try {
          comm::make_backend("nccl", w, "w");
          ADD_FAILURE() << "an nccl backend was made without a GPU";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("LOCKSTEP_BACKEND"), std::string::npos) << e.what();
        }
      },
      options()));
}

// --- Two ranks -------------------------------------------------------------

// Two ranks on one GPU: refused at creation, naming both ranks, on both.
TEST(NcclTwoRanks, SharingOneGpuIsRefusedNamingTheRanks) {
  LOCKSTEP_REQUIRE_GPUS(1);
  expect_all_ok(run_workers_raw(
      2,
      [](const comm::WorldInfo& w) {
        try {
          nccl_backend(w, 0);
          ADD_FAILURE() << "two ranks on GPU 0 were accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("ranks 0 and 1 both use GPU 0"), std::string::npos)
              << e.what();
        }
      },
      options()));
}

// Under LOCKSTEP_VERIFY_OPS=1 every collective first compares descriptors:
// ranks calling different collectives all get MismatchError and the
// communicator still gives right results.
TEST(NcclTwoRanks, VerifiedMismatchesFailOnEveryRankAndLeaveItUsable) {
  LOCKSTEP_REQUIRE_GPUS(2);
  MultiProcOptions o = options();
  o.env["LOCKSTEP_VERIFY_OPS"] = "1";
  expect_all_ok(run_workers_raw(
      2,
      [](const comm::WorldInfo& w) {
        Communicator c(w, std::make_unique<StagedBackend>(nccl_backend(w, w.rank)));
        matrix::every_kind_pair_mismatch_then_right_results(c);
      },
      o));
}

// A peer that dies mid-job is named in the survivor's PeerFailure (found
// through its pid), and the survivor does not hang.
TEST(NcclTwoRanks, DeadPeerIsNamed) {
  LOCKSTEP_REQUIRE_GPUS(2);
  auto results = run_workers_raw(
      2,
      [](const comm::WorldInfo& w) {
        auto b = nccl_backend(w, w.rank);
        DeviceMemory& dm = *b->device_memory();
        float* d = static_cast<float*>(dm.allocate(1024 * sizeof(float)));
        b->allreduce(d, d, 1024, comm::DataType::kFloat32, comm::ReduceOp::kSum);  // connected
        if (w.rank == 1) _exit(0);  // dies without a word
        try {
          b->allreduce(d, d, 1024, comm::DataType::kFloat32, comm::ReduceOp::kSum);
          ADD_FAILURE() << "the allreduce completed without rank 1";
        } catch (const PeerFailure& e) {
          EXPECT_EQ(e.rank(), 1) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
      },
      options());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
}

}  // namespace
}  // namespace lockstep::testing
