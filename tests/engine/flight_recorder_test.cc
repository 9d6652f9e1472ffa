// The flight recorder (Note [Flight recorder]): every rank dumps on a
// failure, `lockstep doctor`'s diagnosis names the rank that diverged, and
// SIGUSR1 dumps a running rank.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine_harness.h"
#include "engine/flight_recorder.h"
#include "lockstep/base/error.h"
#include "tools/doctor/diagnose.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using engine::Handle;

std::string fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("lockstep-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  return dir.string();
}

// Rank 2 submits a misspelt name where ranks 0 and 1 submit the real one:
// the deadlock fails every rank, each dumps, and the doctor names rank 2.
TEST(FlightRecorder, EveryRankDumpsOnFailureAndTheDoctorNamesTheDivergingRank) {
  const std::string dir = fresh_dir("flight-diverge");
  MultiProcOptions options;
  options.env["LOCKSTEP_FLIGHT_DIR"] = dir;
  auto results = run_engines(
      3,
      [](Engine& e) {
        std::vector<float> x(256, 1.0f);
        for (int step = 0; step < 3; ++step)
          for (const char* name : {"conv.grad", "fc.grad"})
            e.allreduce_async(name, x.data(), x.data(), {256}, DataType::kFloat32).wait();
        const char* name = e.rank() == 2 ? "fc.grad_typo" : "fc.grad";
        Handle h = e.allreduce_async(name, x.data(), x.data(), {256}, DataType::kFloat32);
        EXPECT_THROW(h.wait(), DeadlockError);
      },
      options);
  expect_all_ok(results);

  std::vector<doctor::RankDump> dumps = doctor::load_dumps(dir);
  ASSERT_EQ(dumps.size(), 3u) << "a dump from every rank";
  for (const auto& d : dumps) {
    EXPECT_NE(d.reason.find("deadlock"), std::string::npos) << d.reason;
    ASSERT_GE(d.operations.size(), 7u);  // 6 that ran, 1 pending
    const doctor::Operation& ran = d.operations.front();
    EXPECT_EQ(ran.state, "done");
    EXPECT_EQ(ran.seq, 0);
    EXPECT_EQ(ran.op, "allreduce");
    EXPECT_EQ(ran.dtype, "f32");
    EXPECT_EQ(ran.bytes, 1024u);
    EXPECT_GT(ran.finished_us, ran.submitted_us);
    EXPECT_TRUE(d.operations.back().pending());
  }
  // Negotiated sequence numbers line up across ranks.
  EXPECT_EQ(dumps[0].operations[5].name, dumps[2].operations[5].name);
  EXPECT_EQ(dumps[0].operations[5].seq, dumps[2].operations[5].seq);

  doctor::Diagnosis diagnosis = doctor::diagnose(dumps);
  EXPECT_EQ(diagnosis.verdict, doctor::Verdict::kDiverged) << diagnosis.summary;
  EXPECT_EQ(diagnosis.culprits, std::vector<int>{2}) << diagnosis.summary;
  EXPECT_NE(diagnosis.summary.find("rank 2 diverged first"), std::string::npos)
      << diagnosis.summary;
  EXPECT_NE(diagnosis.summary.find("allreduce 'fc.grad_typo'"), std::string::npos);
  std::printf("%s", doctor::report(dumps, diagnosis).c_str());
  fs::remove_all(dir);
}

TEST(FlightRecorder, SigusrOneDumpsARunningRank) {
  const std::string dir = fresh_dir("flight-sigusr1");
  MultiProcOptions options;
  options.env["LOCKSTEP_FLIGHT_DIR"] = dir;
  auto results = run_engines(
      1,
      [&](Engine& e) {
        std::vector<float> x(8, 1.0f);
        e.allreduce_async("before.signal", x.data(), x.data(), {8}, DataType::kFloat32).wait();
        ::raise(SIGUSR1);
        const std::string path = dir + "/rank0.json";
        for (int i = 0; i < 200 && !fs::exists(path); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ASSERT_TRUE(fs::exists(path)) << "no dump 2 s after SIGUSR1";
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        doctor::RankDump d = doctor::parse_dump(text.str(), path);
        EXPECT_EQ(d.reason.rfind("SIGUSR1", 0), 0u) << d.reason;
        ASSERT_FALSE(d.operations.empty());
        EXPECT_EQ(d.operations.back().name, "before.signal");
        EXPECT_EQ(d.operations.back().state, "done");
      },
      options);
  expect_all_ok(results);
  fs::remove_all(dir);
}

TEST(FlightRecorder, RingKeepsTheNewestRecordsAndDropsUpdatesToOverwrittenOnes) {
  engine::detail::FlightRecorder recorder(4, {0, 1, "job", fresh_dir("flight-ring")});
  engine::detail::Request r;
  r.name = "t";
  r.shape = {2};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(recorder.submitted(0, r));
  recorder.finished(ids[0], nullptr);  // overwritten: ignored
  recorder.negotiated(ids[5], 9);
  recorder.finished(ids[5], std::make_exception_ptr(MismatchError("shapes differ")));
  auto j = nlohmann::json::parse(recorder.to_json("test"));
  ASSERT_EQ(j["operations"].size(), 4u);
  EXPECT_EQ(j["operations"][0]["id"], ids[2]);
  EXPECT_EQ(j["operations"][3]["seq"], 9);
  EXPECT_EQ(j["operations"][3]["state"], "failed");
  EXPECT_EQ(j["operations"][3]["error_kind"], "mismatch");
  EXPECT_EQ(j["recorded"], 6);
}

}  // namespace
}  // namespace lockstep::testing
