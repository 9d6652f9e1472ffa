// `lockstep-convert` as users run it: exit codes, outputs, error messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "lockstep/data/idx.h"
#include "lockstep/data/record_index.h"
#include "lockstep/data/source.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::TempDir;

std::string convert_binary() {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return std::string(dir ? dir : ".") + "/lockstep-convert";
}

// Runs the command; returns its exit code and puts stdout+stderr in *output.
int run(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  output->clear();
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) output->append(buf, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ConvertCli, IdxWritesShardsIndexAndProgress) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir out;
  std::string output;
  ASSERT_EQ(run(convert_binary() + " idx --mnist-dir " + kFashionMnistDir +
                    " --split t10k --shards 3 --out " + out.str(),
                &output),
            0)
      << output;
  EXPECT_NE(output.find("10000/10000 records"), std::string::npos) << output;
  RecordIndex index = RecordIndex::load(out / "t10k.index.json");
  EXPECT_EQ(index.shards.size(), 3u);
  EXPECT_EQ(index.total_records(), 10000u);
}

TEST(ConvertCli, IdxToHdf5ThenLmdbThenRecords) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir out;
  std::string output;
  ASSERT_EQ(run(convert_binary() + " idx --mnist-dir " + kFashionMnistDir +
                    " --split t10k --format hdf5 --shards 1 --out " + out.str(),
                &output),
            0)
      << output;
  EXPECT_NE(output.find("read it from " + (out / "t10k.h5")), std::string::npos) << output;
  ASSERT_EQ(run(convert_binary() + " data --in " + (out / "t10k.h5") + " --format lmdb --out " +
                    out.str() + " --name t10k",
                &output),
            0)
      << output;
  ASSERT_EQ(run(convert_binary() + " data --in " + (out / "t10k.lmdb") +
                    " --format records --out " + (out / "rec") + " --name t10k",
                &output),
            0)
      << output;
  EXPECT_EQ(open_source({{out / "t10k.lmdb"}})->total_records(), 10000u);
  EXPECT_EQ(RecordIndex::load(out / "rec/t10k.index.json").total_records(), 10000u);
  // An unknown format is refused by name before anything is read.
  EXPECT_NE(run(convert_binary() + " data --in x --format parquet --out " + out.str(), &output), 0)
      << output;
  EXPECT_NE(output.find("--format"), std::string::npos) << output;
}

TEST(ConvertCli, MissingInputFailsWithAMessage) {
  TempDir out;
  std::string output;
  EXPECT_EQ(run(convert_binary() +
                    " idx --images /nonexistent.gz --labels /nonexistent2.gz --out " + out.str(),
                &output),
            1);
  EXPECT_NE(output.find("/nonexistent.gz"), std::string::npos) << output;
}

}  // namespace
}  // namespace lockstep::data
