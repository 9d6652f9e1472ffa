// Converters on real data: Debian's Fashion-MNIST files and a generated
// folder of JPEG/PNG images.
#include "lockstep/data/convert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "lockstep/base/error.h"

#include "lockstep/data/example.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/image.h"
#include "lockstep/data/record_table.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

Example example_at(const RecordTable& table, uint64_t i) {
  std::string error;
  auto e = parse_example(table.read(i), &error);
  if (!e) throw Error(error);
  return *e;
}

void expect_matches_idx(const std::string& split, uint64_t expected_count) {
  std::string dir = kFashionMnistDir;
  if (!fs::exists(dir + "/" + split + "-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir out;
  ConvertResult result =
      convert_idx(dir + "/" + split + "-images-idx3-ubyte.gz",
                  dir + "/" + split + "-labels-idx1-ubyte.gz", {out.str(), split, 4, nullptr});
  EXPECT_EQ(result.records, expected_count);
  MnistSplit idx = load_mnist_split(dir, split);
  RecordTable table(RecordIndex::load(result.index_path));
  ASSERT_EQ(table.size(), expected_count);
  std::vector<bool> seen(expected_count, false);
  for (uint64_t i = 0; i < table.size(); ++i) {
    Example e = example_at(table, i);
    int64_t source = e.int64s("index")->at(0);
    ASSERT_LT(uint64_t(source), expected_count);
    ASSERT_FALSE(seen[source]);
    seen[source] = true;
    ASSERT_EQ(e.int64s("label")->at(0), idx.labels.bytes[source]) << "record " << i;
    ASSERT_EQ(e.bytes("image")->at(0),
              std::string(reinterpret_cast<const char*>(&idx.images.bytes[source * 784]), 784));
    ASSERT_EQ(*e.int64s("shape"), (Int64List{28, 28}));
  }
}

TEST(ConvertIdx, FashionMnistTrainHas60000RecordsWithTheIdxLabels) {
  expect_matches_idx("train", 60000);
}

TEST(ConvertIdx, FashionMnistTestHas10000RecordsWithTheIdxLabels) {
  expect_matches_idx("t10k", 10000);
}

Image gradient(int h, int w, int c) {
  Image img{h, w, c, std::vector<uint8_t>(size_t(h) * w * c)};
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
  return img;
}

TEST(ConvertImages, LabelsFollowSortedClassFolders) {
  TempDir src, out;
  fs::create_directories(src / "cat");
  fs::create_directories(src / "ant");
  testing::write_file(src / "cat/1.jpg", encode_jpeg(gradient(12, 10, 3)));
  testing::write_file(src / "cat/2.PNG", encode_png(gradient(8, 8, 1)));
  testing::write_file(src / "ant/a.png", encode_png(gradient(5, 6, 3)));
  testing::write_file(src / "ant/notes.txt", "not an image");
  uint64_t ignored = 0;
  ConvertResult result =
      convert_image_folder(src.str(), {out.str(), "pets", 2, nullptr}, 0, &ignored);
  EXPECT_EQ(result.records, 3u);
  EXPECT_EQ(ignored, 1u);
  RecordTable table(RecordIndex::load(result.index_path));
  std::map<int64_t, std::pair<std::string, int64_t>> by_index;  // index -> (class, label)
  for (uint64_t i = 0; i < table.size(); ++i) {
    Example e = example_at(table, i);
    by_index[e.int64s("index")->at(0)] = {e.bytes("class")->at(0), e.int64s("label")->at(0)};
    std::string error;
    EXPECT_TRUE(decode_image(e.bytes("image")->at(0), 0, &error)) << error;
  }
  EXPECT_EQ(by_index[0], std::make_pair(std::string("ant"), int64_t{0}));
  EXPECT_EQ(by_index[1], std::make_pair(std::string("cat"), int64_t{1}));
  EXPECT_EQ(by_index[2], std::make_pair(std::string("cat"), int64_t{1}));
}

TEST(ConvertImages, FileNamedLikeAnImageButNotOneIsAnError) {
  TempDir src, out;
  fs::create_directories(src / "x");
  testing::write_file(src / "x/fake.jpg", "plain text");
  try {
    convert_image_folder(src.str(), {out.str(), "bad", 1, nullptr});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fake.jpg"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep::data
