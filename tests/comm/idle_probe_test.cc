// Backend::set_idle_probe (Note [Spinning while the caller is blocked] in
// src/comm/transport/shm/sync.cc): while the probe says the caller is
// blocked, a shared-memory wait spins past its budget instead of sleeping.
// The spin is an optimisation only: results, late peers, a probe that drops
// mid-wait and dead peers must behave exactly as without it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;
using std::chrono::milliseconds;

MultiProcOptions spinning() {
  MultiProcOptions o;
  o.env["LOCKSTEP_SPIN_US"] = "50";  // 2 ms idle spins even where auto would say 0
  o.env["LOCKSTEP_TIMEOUT"] = "20";
  return o;
}

// Rank 0 arrives during rank 1's idle spin (0 and 1 ms late), after it has
// run out (30 ms late: rank 1 sleeps), and once while the probe drops to 0
// mid-wait; every allreduce sums correctly, small and large.
TEST(IdleProbe, CollectivesAreExactWhetherThePeerComesDuringTheSpinOrAfterIt) {
  auto results = run_workers(
      2,
      [](Communicator& c) {
        std::atomic<int> blocked{1};
        c.backend().set_idle_probe(&blocked);
        int call = 0;
        for (size_t n : {size_t{16}, size_t{300'000}}) {
          for (int late_ms : {0, 1, 30, 30}) {
            const bool drop = late_ms == 30 && call % 2 == 1;
            std::thread dropper;
            if (c.rank() == 1 && drop)
              dropper = std::thread([&] {
                std::this_thread::sleep_for(milliseconds(1));
                blocked.store(0);
              });
            if (c.rank() == 0) std::this_thread::sleep_for(milliseconds(late_ms));
            std::vector<float> x(n, static_cast<float>(c.rank() + 1 + call));
            c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
            const float want = static_cast<float>(3 + 2 * call);
            EXPECT_EQ(x.front(), want) << "call " << call;
            EXPECT_EQ(x.back(), want) << "call " << call;
            if (dropper.joinable()) dropper.join();
            blocked.store(1);
            ++call;
          }
        }
        c.backend().set_idle_probe(nullptr);
      },
      spinning());
  expect_all_ok(results);
}

// A peer that dies while the caller spins is still found by liveness and
// reported as a PeerFailure naming it: the spin is bounded, never a hang.
TEST(IdleProbe, APeerThatDiesWhileTheCallerSpinsIsReportedByName) {
  auto results = run_workers(
      2,
      [](Communicator& c) {
        std::atomic<int> blocked{1};
        c.backend().set_idle_probe(&blocked);
        std::vector<float> x(64, 1.0f);
        c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        if (c.rank() == 1) kill(getpid(), SIGKILL);
        try {
          c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
          ADD_FAILURE() << "the allreduce with a dead peer returned";
        } catch (const PeerFailure& e) {
          EXPECT_EQ(e.rank(), 1) << e.what();
        }
        c.backend().set_idle_probe(nullptr);
      },
      spinning());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
  EXPECT_EQ(results[1].signal, SIGKILL) << results[1].describe();
}

}  // namespace
}  // namespace lockstep::testing
