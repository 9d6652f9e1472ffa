// Process sets, the timeline file and autotune.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine_harness.h"
#include "engine/trace_reader.h"
#include "lockstep/base/error.h"

namespace lockstep::testing {
namespace {

using engine::Handle;

TEST(EngineProcessSets, StaticAndRuntimeSets) {
  auto results = run_engines(
      3,
      [](Engine& e) {
        const int r = e.rank();
        // Set 1 = {0,2} from the config; set 2 = {1,2} added now by everyone.
        int added = e.add_process_set({2, 1});
        EXPECT_EQ(added, 2);
        std::vector<float> x(3, static_cast<float>(r + 1));
        if (r == 0 || r == 2) {
          e.allreduce_async("x", x.data(), x.data(), {3}, DataType::kFloat32, ReduceOp::kSum, 1, 1,
                            in_set(1))
              .wait();
          EXPECT_EQ(x[0], 4.0f);  // 1 + 3
        } else {
          expect_throw_with<InvalidArgument>(
              [&] {
                e.allreduce_async("x", x.data(), x.data(), {3}, DataType::kFloat32, ReduceOp::kSum,
                                  1, 1, in_set(1));
              },
              {"not a member of process set 1"});
        }
        std::vector<int32_t> y = {r * 10};
        if (r != 0) {
          // Same name in two sets is fine; broadcast root is a set rank (1 = job rank 2).
          e.broadcast_async("x", y.data(), {1}, DataType::kInt32, 1, in_set(2)).wait();
          EXPECT_EQ(y[0], 20);
          e.barrier(2);
        }
        std::vector<float> all(1, 1.0f);
        e.allreduce_async("x", all.data(), all.data(), {1}, DataType::kFloat32).wait();
        EXPECT_EQ(all[0], 3.0f);
      },
      {},
      [](EngineConfig& c) {
        c.process_sets = {{0, 2}};
      });
  expect_all_ok(results);
}

TEST(EngineTimeline, WritesEveryPhaseAsChromeTrace) {
  std::string path = "/tmp/lockstep-timeline-" + std::to_string(getpid()) + ".json";
  MultiProcOptions options;
  options.env["LOCKSTEP_TIMELINE"] = path;
  auto results = run_engines(
      2,
      [](Engine& e) {
        for (int step = 0; step < 3; ++step) {
          std::vector<std::vector<float>> t(5, std::vector<float>(16, 1.0f));
          std::vector<Handle> hs;
          for (int i = 0; i < 5; ++i)
            hs.push_back(e.allreduce_async("grad" + std::to_string(i), t[i].data(), t[i].data(),
                                           {16}, DataType::kFloat32));
          for (auto& h : hs) h.wait();
        }
      },
      options);
  expect_all_ok(results);
  nlohmann::json trace = parse_trace(path);
  ASSERT_TRUE(trace.is_array());
  std::set<std::string> phases, rows, algorithms;
  for (const auto& ev : trace) {
    phases.insert(ev.value("name", ""));
    if (ev.value("name", "") == "thread_name") rows.insert(ev["args"]["name"].get<std::string>());
    if (ev.value("name", "") == "COLLECTIVE") algorithms.insert(ev["args"]["algorithm"]);
  }
  for (const char* p : {"NEGOTIATE", "WAIT_FOR_DATA", "FUSE_COPY_IN", "COLLECTIVE", "COPY_OUT"})
    EXPECT_TRUE(phases.count(p)) << "no " << p << " event";
  EXPECT_FALSE(phases.count("CYCLE_START")) << "cycle markers only when asked";
  EXPECT_TRUE(rows.count("grad4"));
  // 64-byte tensors between 2 ranks: the shm transport's one-step path.
  EXPECT_EQ(algorithms, std::set<std::string>{"one_step"});
  ::unlink(path.c_str());
}

TEST(EngineTimeline, KilledProcessLeavesALoadableTrace) {
  std::string path = "/tmp/lockstep-timeline-killed-" + std::to_string(getpid()) + ".json";
  auto results = run_workers_raw(1, [&](const comm::WorldInfo& world) {
    EngineConfig config = EngineConfig::from_knobs();
    config.timeline_path = path;
    Engine e(comm::Communicator::create(world, "shm"), config);
    std::vector<float> x(8);
    for (int i = 0; i < 20; ++i)
      e.allreduce_async("k" + std::to_string(i), x.data(), x.data(), {8}, DataType::kFloat32)
          .wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the writer drain
    ::raise(SIGKILL);
  });
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].signal, SIGKILL);
  nlohmann::json trace = parse_trace(path);
  std::set<std::string> phases;
  for (const auto& ev : trace) phases.insert(ev.value("name", ""));
  EXPECT_TRUE(phases.count("COLLECTIVE"));
  ::unlink(path.c_str());
}

TEST(EngineTimeline, StartAndStopAtRuntime) {
  std::string path = "/tmp/lockstep-timeline-rt-" + std::to_string(getpid()) + ".json";
  auto world = local_world(0, 1, unique_job_id());
  Engine e(comm::Communicator::create(world, "shm"));
  std::vector<float> x(4);
  e.allreduce_async("before", x.data(), x.data(), {4}, DataType::kFloat32).wait();
  e.start_timeline(path);
  e.allreduce_async("during", x.data(), x.data(), {4}, DataType::kFloat32).wait();
  e.stop_timeline();
  e.allreduce_async("after", x.data(), x.data(), {4}, DataType::kFloat32).wait();
  std::string text;
  {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto trace = nlohmann::json::parse(text);  // properly closed: strict JSON
  std::set<std::string> rows;
  for (const auto& ev : trace)
    if (ev.value("name", "") == "thread_name") rows.insert(ev["args"]["name"].get<std::string>());
  EXPECT_EQ(rows, (std::set<std::string>{"during"}));
  ::unlink(path.c_str());
}

// Horovod's start_timeline(path, mark_cycles=True): a global instant event
// at the start of every engine cycle, so each collective follows one.
TEST(EngineTimeline, MarksEveryCycleWhenAsked) {
  std::string path = "/tmp/lockstep-timeline-cycles-" + std::to_string(getpid()) + ".json";
  auto results = run_engines(2, [&](Engine& e) {
    e.start_timeline(path, /*mark_cycles=*/true);  // rank 0 writes
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x(16, 1.0f);
      e.allreduce_async("step" + std::to_string(step), x.data(), x.data(), {16}, DataType::kFloat32)
          .wait();
    }
    e.stop_timeline();
  });
  expect_all_ok(results);
  nlohmann::json trace = parse_trace(path);
  std::vector<double> cycles, collectives;
  for (const auto& ev : trace) {
    if (ev.value("name", "") == "CYCLE_START") {
      EXPECT_EQ(ev.value("ph", ""), "i");
      EXPECT_EQ(ev.value("s", ""), "g");  // global scope, not a tensor's row
      EXPECT_EQ(ev["args"]["process_set"], 0);
      cycles.push_back(ev["ts"].get<double>());
    }
    if (ev.value("name", "") == "COLLECTIVE") collectives.push_back(ev["ts"].get<double>());
  }
  ASSERT_EQ(collectives.size(), 3u);
  EXPECT_GE(cycles.size(), 3u);  // one cycle at least per negotiated step
  EXPECT_TRUE(std::is_sorted(cycles.begin(), cycles.end()));
  // Each step ran in a cycle that started after the previous step's collective.
  double previous = -1;
  for (double c : collectives) {
    EXPECT_TRUE(
        std::any_of(cycles.begin(), cycles.end(), [&](double t) { return t > previous && t <= c; }))
        << "no CYCLE_START between " << previous << " and " << c;
    previous = c;
  }
  ::unlink(path.c_str());
}

// Horovod's remove_process_set: refused for the global set, unknown or
// removed ids, and while an operation of the set is pending on some rank
// (every rank alike); afterwards the set is gone and its id not reused.
TEST(EngineProcessSets, RemoveProcessSet) {
  MultiProcOptions options;
  options.env["LOCKSTEP_DEADLOCK_TIMEOUT"] = "30";  // rank 0's pending op below waits on purpose
  auto results = run_engines(
      3,
      [](Engine& e) {
        const int r = e.rank();
        const bool member = r != 1;
        int id = e.add_process_set({0, 2});
        ASSERT_EQ(id, 1);
        expect_throw_with<InvalidArgument>([&] { e.remove_process_set(0); },
                                           {"remove_process_set(0)", "global set"});
        expect_throw_with<InvalidArgument>([&] { e.remove_process_set(7); },
                                           {"remove_process_set(7)", "no such process set"});
        std::vector<float> x(2, 1.0f);
        Handle late;
        if (r == 0)  // pending: rank 2 submits it only after the refused removal
          late = e.allreduce_async("late", x.data(), x.data(), {2}, DataType::kFloat32,
                                   ReduceOp::kSum, 1, 1, in_set(id));
        std::vector<std::string> want = {"remove_process_set(1)", "1 on rank 0", "wait for"};
        if (r == 0) want.push_back("here: 'late'");
        expect_throw_with<InvalidArgument>([&] { e.remove_process_set(id); }, want);
        if (r == 2)
          late = e.allreduce_async("late", x.data(), x.data(), {2}, DataType::kFloat32,
                                   ReduceOp::kSum, 1, 1, in_set(id));
        if (member) {
          late.wait();
          EXPECT_EQ(x[0], 2.0f);
        }
        e.remove_process_set(id);
        if (member)
          expect_throw_with<InvalidArgument>(
              [&] {
                e.allreduce_async("after", x.data(), x.data(), {2}, DataType::kFloat32,
                                  ReduceOp::kSum, 1, 1, in_set(id));
              },
              {"process set 1 was removed"});
        expect_throw_with<InvalidArgument>([&] { e.remove_process_set(id); },
                                           {"remove_process_set(1)", "already removed"});
        // The same ranks again: a new id, which works.
        int again = e.add_process_set({0, 2});
        EXPECT_EQ(again, 2);
        if (member) {
          std::vector<float> y(1, static_cast<float>(r));
          e.allreduce_async("y", y.data(), y.data(), {1}, DataType::kFloat32, ReduceOp::kSum, 1, 1,
                            in_set(again))
              .wait();
          EXPECT_EQ(y[0], 2.0f);
        }
        std::vector<float> all(1, 1.0f);
        e.allreduce_async("all", all.data(), all.data(), {1}, DataType::kFloat32).wait();
        EXPECT_EQ(all[0], 3.0f);
      },
      options);
  expect_all_ok(results);
}

TEST(EngineAutotune, ConvergesToTheSameValidThresholdEverywhere) {
  MultiProcOptions options;
  options.env["LOCKSTEP_AUTOTUNE"] = "1";
  options.env["LOCKSTEP_AUTOTUNE_SAMPLES"] = "2";
  auto results = run_engines(
      2,
      [](Engine& e) {
        int steps = 0;
        while (!e.autotune_converged() && steps < 200) {
          std::vector<std::vector<float>> t(8, std::vector<float>(1000, 1.0f));
          std::vector<Handle> hs;
          for (int i = 0; i < 8; ++i)
            hs.push_back(e.allreduce_async("w" + std::to_string(i), t[i].data(), t[i].data(),
                                           {1000}, DataType::kFloat32));
          for (auto& h : hs) h.wait();
          ++steps;
          // Every rank must see convergence in the same cycle order; agree on it.
          int32_t converged = e.autotune_converged() ? 1 : 0;
          e.allreduce_async("conv", &converged, &converged, {}, DataType::kInt32, ReduceOp::kMin)
              .wait();
          if (converged) break;
        }
        EXPECT_TRUE(e.autotune_converged());
        int64_t threshold = static_cast<int64_t>(e.fusion_threshold());
        EXPECT_TRUE(threshold >= (1 << 20) && threshold <= (128 << 20)) << threshold;
        int64_t max = threshold;
        e.allreduce_async("thr", &max, &max, {}, DataType::kInt64, ReduceOp::kMax).wait();
        EXPECT_EQ(max, threshold);
      },
      options);
  expect_all_ok(results);
}

}  // namespace
}  // namespace lockstep::testing
