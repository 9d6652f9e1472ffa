// TensorBoard event files: the hand-encoded protocol buffers against bytes
// worked out from the encoding rules, then whole files read back by
// read_events.py, which shares no code with the writer (its own CRC-32C,
// protoc --decode_raw, and protoc --decode against tensorboard_subset.proto
// for the field types).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/summary/event_writer.h"
#include "lockstep/summary/hparams.h"
#include "support/scratch.h"
#include "summary/wire.h"

namespace lockstep::summary {
namespace {

namespace fs = std::filesystem;

struct Reader {
  int status = -1;
  std::string out;
};

Reader read_events(const std::string& args) {
  const std::string cmd =
      fmt::format("/usr/bin/python3 {}/read_events.py {} 2>&1", LOCKSTEP_SUMMARY_TEST_DIR, args);
  Reader r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int rc = ::pclose(p);
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return r;
}

std::string schema() {
  return fmt::format("{}/tensorboard_subset.proto", LOCKSTEP_SUMMARY_TEST_DIR);
}

TEST(SummaryWire, VarintsAndKeysFollowTheEncodingRules) {
  std::string out;
  wire::varint(out, 1);
  wire::varint(out, 300);  // 0b1_0010_1100: low 7 bits with the continuation bit, then 2
  wire::field_varint(out, 2, 150);
  EXPECT_EQ(out, std::string("\x01\xac\x02\x10\x96\x01", 6));
}

TEST(SummaryWire, ScalarIsTagThenSimpleValueAsFloat) {
  Summary s;
  s.scalar("a", 1.0);
  // Summary.value (1, length 8) { tag (1, length 1) "a"; simple_value (2, fixed32) 1.0f }
  EXPECT_EQ(s.bytes(), std::string("\x0a\x08\x0a\x01"
                                   "a"
                                   "\x15\x00\x00\x80\x3f",
                                   10));
  EXPECT_EQ(s.values(), 1);
}

TEST(EventWriter, NamesTheFileLikeTensorFlow) {
  const auto dir = lockstep::testing::scratch_folder("summary", "name");
  EventWriter w(dir.string(), "sweep");
  const std::string name = fs::path(w.path()).filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\.[^.]+.*\.)" +
                                                std::to_string(::getpid()) + R"(\.sweep)")))
      << name;
}

TEST(EventWriter, IndependentReaderFindsEveryTagAndStep) {
  const auto dir = lockstep::testing::scratch_folder("summary", "scalars");
  {
    EventWriter w(dir.string());
    w.write(0, Summary().text("config", "`lockstep-fashion-mnist --lr 0.01`"));
    for (int64_t step : {10, 20, 30})
      w.write(step, Summary()
                        .scalar("train/loss", 2.0 / static_cast<double>(step))
                        .scalar("rank_1/step_time_ms", static_cast<double>(step) + 0.5));
    w.write(1, Summary().scalar("test/accuracy", 0.875));
  }
  const Reader r = read_events(dir.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out,
            "version brain.Event:2\n"
            "0 config plugin=text\n"
            "10 train/loss 0.2\n10 rank_1/step_time_ms 10.5\n"
            "20 train/loss 0.1\n20 rank_1/step_time_ms 20.5\n"
            "30 train/loss 0.0666667\n30 rank_1/step_time_ms 30.5\n"
            "1 test/accuracy 0.875\n");
}

TEST(EventWriter, SchemaDecodesTextAndHParamsRecords) {
  const auto dir = lockstep::testing::scratch_folder("summary", "hparams");
  {
    EventWriter w(dir.string());
    hparams::Experiment e;
    e.name = "lr sweep";
    e.time_created_secs = 1.5e9;
    e.hparams.resize(3);
    e.hparams[0].name = "lr";
    e.hparams[0].min = 1e-4;
    e.hparams[0].max = 1e-1;
    e.hparams[1].name = "batch_size";
    e.hparams[1].choices = {32.0, 64.0};
    e.hparams[2].name = "optimizer";
    e.hparams[2].choices = {std::string("sgd")};
    e.metrics.push_back(
        {.tag = "sweep/test_accuracy", .display_name = "test_accuracy", .description = ""});
    w.write(0, hparams::experiment(e));
    w.write(0, hparams::session_start({{"lr", 0.01}, {"optimizer", std::string("adam")}}, 1.6e9));
    w.write(2, Summary().scalar("sweep/test_accuracy", 0.75));
    w.write(0, hparams::session_end(hparams::Status::kFailure, 1.7e9));
    w.write(0, Summary().text("config", "**bold**"));
  }
  const Reader r = read_events(fmt::format("--schema {} {}", schema(), dir.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* want : {"file_version: \"brain.Event:2\"",
                           "tag: \"_hparams_/experiment\"",
                           "plugin_name: \"hparams\"",
                           "data_class: DATA_CLASS_TENSOR",
                           "name: \"lr sweep\"",
                           "type: DATA_TYPE_FLOAT64",
                           "min_value: 0.0001",
                           "max_value: 0.1",
                           "number_value: 64",
                           "type: DATA_TYPE_STRING",
                           "string_value: \"sgd\"",
                           "tag: \"sweep/test_accuracy\"",
                           "display_name: \"test_accuracy\"",
                           "tag: \"_hparams_/session_start_info\"",
                           "key: \"lr\"",
                           "number_value: 0.01",
                           "string_value: \"adam\"",
                           "start_time_secs: 1600000000",
                           "step: 2",
                           "simple_value: 0.75",
                           "status: STATUS_FAILURE",
                           "end_time_secs: 1700000000",
                           "plugin_name: \"text\"",
                           "dtype: DT_STRING",
                           "string_val: \"**bold**\""})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
}

// The reader checks CRCs: a flipped payload byte is reported, not decoded.
TEST(EventWriter, ReaderRejectsACorruptedRecord) {
  const auto dir = lockstep::testing::scratch_folder("summary", "corrupt");
  std::string path;
  {
    EventWriter w(dir.string());
    w.write(5, Summary().scalar("train/loss", 1.0));
    path = w.path();
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-6, std::ios::end);  // inside the last record's payload
    f.put('\x7f');
  }
  const Reader r = read_events(path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("record 1: payload CRC mismatch"), std::string::npos) << r.out;
}

TEST(EventWriter, NamesTheDirectoryItCannotCreate) {
  const auto dir = lockstep::testing::scratch_folder("summary", "blocked");
  std::ofstream(dir / "file") << "x";
  try {
    EventWriter w((dir / "file" / "sub").string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file/sub"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::summary
