// The main job as a user runs it: the binary, a subprocess, its metrics file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "examples/example_util.h"

namespace {

using namespace lockstep::testing;

// A quick run: 2 epochs over 6000 samples (~190 steps), evaluated on 2000.
const char* kQuick = "--train-subset 6000 --test-subset 2000 --epochs 2 --batch-size 64";

TEST(FashionMnist, QuickRunLearns) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = scratch("quick");
  auto cmd = fmt::format("'{}' {} --metrics '{}' 2>'{}'", bin("lockstep-fashion-mnist"), kQuick,
                         (dir / "m.jsonl").string(), (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  // Chance is 10%; this subset reaches ~83% after 2 epochs.
  EXPECT_GT(lines[1]["test_accuracy"].get<double>(), 0.75);
  EXPECT_LT(lines[1]["train_loss"].get<double>(), lines[0]["train_loss"].get<double>());
}

// --data may name a folder of record shards instead of the IDX files; the
// same subset run must learn just as well from them.
TEST(FashionMnist, TrainsFromRecordShards) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = scratch("shards");
  for (const char* split : {"train", "t10k"}) {
    auto convert = fmt::format(
        "'{}' convert idx --mnist-dir /usr/share/datasets/fashion-mnist "
        "--split {} --out '{}' --shards 3 2>>'{}'",
        bin("lockstep"), split, (dir / "shards").string(), (dir / "err.txt").string());
    ASSERT_EQ(std::system(convert.c_str()), 0) << convert;
  }
  auto cmd = fmt::format("'{}' {} --data '{}' --metrics '{}' 2>>'{}'",
                         bin("lockstep-fashion-mnist"), kQuick, (dir / "shards").string(),
                         (dir / "m.jsonl").string(), (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_GT(lines[1]["test_accuracy"].get<double>(), 0.75);
}

TEST(FashionMnist, ResumeContinuesFromCheckpoint) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = scratch("resume");
  auto base = fmt::format(
      "'{}' --train-subset 2000 --test-subset 500 --batch-size 64 "
      "--checkpoint-dir '{}' --metrics '{}' 2>>'{}'",
      bin("lockstep-fashion-mnist"), (dir / "ckpt").string(), (dir / "m.jsonl").string(),
      (dir / "err.txt").string());
  ASSERT_EQ(std::system((base + " --epochs 1").c_str()), 0);
  ASSERT_TRUE(fs::exists(dir / "ckpt" / "checkpoint.pt"));
  ASSERT_EQ(std::system((base + " --epochs 2 --resume").c_str()), 0);
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);  // the resumed run trained only epoch 2
  EXPECT_EQ(lines[1]["epoch"].get<int>(), 2);
  EXPECT_EQ(lines[1]["step"].get<int>(), 2 * lines[0]["step"].get<int>());
}

TEST(FashionMnist, MissingDataNamesThePackage) {
  auto dir = scratch("missing");
  auto cmd = fmt::format("'{}' --data /nonexistent/fashion 2>'{}'", bin("lockstep-fashion-mnist"),
                         (dir / "err.txt").string());
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::ifstream in(dir / "err.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("dataset-fashion-mnist"), std::string::npos) << text;
}

// Telemetry of a 2-worker run with --log-ranks (default --log-every 10):
// the per-step rows, and the TensorBoard events in the run directory as an
// independent reader (tests/summary/read_events.py) decodes them, with the
// same values as the rows.
void expect_step_rows_and_events(const fs::path& metrics, const fs::path& run_dir,
                                 const std::vector<nlohmann::json>& epochs) {
  auto steps = read_metrics(metrics, /*steps=*/true);
  const int total = epochs.back()["step"].get<int>();  // 47 steps per epoch
  ASSERT_EQ(static_cast<int>(steps.size()), total / 10)
      << "a row every 10 of " << total << " steps";
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& r = steps[i];
    EXPECT_EQ(r["step"].get<int>(), 10 * static_cast<int>(i + 1)) << r;
    EXPECT_GT(r["loss"].get<double>(), 0) << r;
    EXPECT_GT(r["lr"].get<double>(), 0) << r;
    EXPECT_GT(r["grad_norm"].get<double>(), 0) << r;
    EXPECT_GE(r["comm_wait_share"].get<double>(), 0) << r;
    EXPECT_LE(r["comm_wait_share"].get<double>(), 1) << r;
    ASSERT_EQ(r["ranks"].size(), 2u) << r;
    EXPECT_GT(r["ranks"][1]["step_ms"].get<double>(), 0) << r;
  }
  const std::string cmd = fmt::format("/usr/bin/python3 '{}/../summary/read_events.py' '{}' 2>&1",
                                      LOCKSTEP_EXAMPLES_TEST_DIR, run_dir.string());
  std::string events;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) events.append(buf, n);
  ASSERT_TRUE(p && pclose(p) == 0) << events;
  // The reader prints the float32 TensorBoard stores to 6 digits: the same here.
  auto f32 = [](const nlohmann::json& v) {
    return static_cast<double>(static_cast<float>(v.get<double>()));
  };
  std::vector<std::string> want = {"0 config plugin=text\n"};
  for (const auto& r : steps) {
    const int s = r["step"].get<int>();
    want.push_back(fmt::format("{} train/loss {:.6g}\n", s, f32(r["loss"])));
    want.push_back(fmt::format("{} train/lr {:.6g}\n", s, f32(r["lr"])));
    want.push_back(fmt::format("{} train/grad_norm {:.6g}\n", s, f32(r["grad_norm"])));
    want.push_back(fmt::format("{} rank_1/step_ms {:.6g}\n", s, f32(r["ranks"][1]["step_ms"])));
  }
  for (const auto& e : epochs) {
    const int s = e["step"].get<int>();
    want.push_back(fmt::format("{} test/accuracy {:.6g}\n", s, f32(e["test_accuracy"])));
    want.push_back(fmt::format("{} epoch/train_loss {:.6g}\n", s, f32(e["train_loss"])));
  }
  for (const auto& w : want) EXPECT_NE(events.find(w), std::string::npos) << w << events;
}

TEST(FashionMnist, TwoWorkersViaLauncher) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  if (!fs::exists(bin("lockstep"))) GTEST_SKIP() << "the lockstep launcher is not built";
  auto dir = scratch("np2");
  auto cmd =
      fmt::format("'{}' run -np 2 '{}' {} --log-ranks --metrics '{}' --run-dir '{}' 2>'{}'",
                  bin("lockstep"), bin("lockstep-fashion-mnist"), kQuick,
                  (dir / "m.jsonl").string(), (dir / "run").string(), (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);  // rank 0 only
  EXPECT_EQ(lines[1]["workers"].get<int>(), 2);
  EXPECT_GT(lines[1]["test_accuracy"].get<double>(), 0.7);
  // --run-dir: run.json records the job's size (from lockstep::torch, after
  // init), and the explicit --metrics wins over DIR/metrics.jsonl.
  std::ifstream run_json(dir / "run" / "run.json");
  auto run = nlohmann::json::parse(run_json);
  EXPECT_EQ(run["workers"].get<int>(), 2);
  EXPECT_EQ(run["metrics"].get<std::string>(), (dir / "m.jsonl").string());
  EXPECT_FALSE(fs::exists(dir / "run" / "metrics.jsonl"));
  expect_step_rows_and_events(dir / "m.jsonl", dir / "run", lines);
}

// --compression onebit-adam: 1-bit Adam after 20 warm-up steps still
// learns (the uncompressed run above reaches > 0.7); bad names, and 1-bit
// Adam or LAMB over the other optimizer, are refused while parsing, with
// status 2 and the flag named.
TEST(FashionMnist, TwoWorkersOneBitAdamAndBadCompression) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  if (!fs::exists(bin("lockstep"))) GTEST_SKIP() << "the lockstep launcher is not built";
  auto dir = scratch("np2-onebit-adam");
  auto cmd = fmt::format(
      "'{}' run -np 2 '{}' {} --compression onebit-adam --compression-warmup 20 "
      "--metrics '{}' 2>'{}'",
      bin("lockstep"), bin("lockstep-fashion-mnist"), kQuick, (dir / "m.jsonl").string(),
      (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["compression"], "onebit-adam");
  EXPECT_GT(lines[1]["test_accuracy"].get<double>(), 0.7);
  for (const char* bad :
       {"zip", "powersgd:0", "fp16", "onebit-lamb", "onebit-adam --optimizer lamb"}) {
    auto err = dir / "bad.txt";
    auto bad_cmd = fmt::format("'{}' --compression {} 2>'{}'", bin("lockstep-fashion-mnist"), bad,
                               err.string());
    const int status = std::system(bad_cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 2) << bad;
    std::ifstream in(err);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("--compression"), std::string::npos) << bad << ": " << text;
  }
}

TEST(FashionMnist, TwoWorkersSyncBatchNormAndTimeline) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  if (!fs::exists(bin("lockstep"))) GTEST_SKIP() << "the lockstep launcher is not built";
  auto dir = scratch("sbn");
  auto cmd = fmt::format(
      "'{}' run -np 2 '{}' --train-subset 3000 --test-subset 1000 --epochs 1 "
      "--sync-batch-norm --timeline '{}' --metrics '{}' 2>'{}'",
      bin("lockstep"), bin("lockstep-fashion-mnist"), (dir / "timeline.json").string(),
      (dir / "m.jsonl").string(), (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_GT(lines[0]["test_accuracy"].get<double>(), 0.6);
  EXPECT_GT(fs::file_size(dir / "timeline.json"), 0u);
}

// Elastic main job: 4 workers, w2 SIGKILLs itself at step 24 of 48; the
// other 3 re-form and finish the epoch. 24 steps x 4 x 64 = 6144 samples are
// committed before the loss and the other 6144 split evenly over 3, so the
// sample log must hold every index of the epoch exactly once.
TEST(FashionMnist, ElasticJobSurvivesAKilledWorkerWithoutRepeatingSamples) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  if (!fs::exists(bin("lockstep"))) GTEST_SKIP() << "the lockstep launcher is not built";
  auto dir = scratch("elastic");
  const int64_t n = 12288;
  auto cmd = fmt::format(
      "'{}' run -np 4 --min-np 2 '{}' --train-subset {} --test-subset 1000 --epochs 1 "
      "--commit-every 4 --inject-kill w2:24 --sample-log '{}' --metrics '{}' 2>'{}'",
      bin("lockstep"), bin("lockstep-fashion-mnist"), n, (dir / "samples").string(),
      (dir / "m.jsonl").string(), (dir / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream err(dir / "err.txt");
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("re-forming the job with the 3 remaining worker(s)"), std::string::npos)
      << text;
  auto lines = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["workers"].get<int>(), 3);
  EXPECT_EQ(lines[0]["reformations"].get<int>(), 1);
  EXPECT_GT(lines[0]["test_accuracy"].get<double>(), 0.6);
  std::vector<int> seen(n, 0);
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().starts_with("samples.")) {
      std::ifstream log(entry.path());
      for (int64_t epoch, index; log >> epoch >> index;) {
        ASSERT_EQ(epoch, 0);
        ASSERT_TRUE(index >= 0 && index < n) << index;
        ++seen[index];
      }
    }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
}

}  // namespace
