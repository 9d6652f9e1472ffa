// HDF5 and LMDB sources against files written another way (h5py, the Python
// lmdb module and a hand-written Example encoder: write_reference.py) and
// against the IDX files they came from; converters between all formats;
// rank assignment through the loader; every kind of bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "lockstep/data/convert.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/source.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

const std::string kImages = std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz";
const std::string kLabels = std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz";

// Runs write_reference.py with /usr/bin/python3 (Debian's, which has h5py and lmdb).
void write_reference(const std::string& args) {
  std::string cmd =
      fmt::format("/usr/bin/python3 {} {} >/dev/null", LOCKSTEP_WRITE_REFERENCE, args);
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << "\nneeds Debian's python3-h5py and python3-lmdb (scripts/setup.sh installs them)";
}

class SourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kImages)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    static const MnistSplit split = load_mnist_split(kFashionMnistDir, "t10k");
    idx_ = &split;
  }
  std::string idx_pixels(uint64_t i) const {
    return std::string(reinterpret_cast<const char*>(&idx_->images.bytes[i * 784]), 784);
  }
  int64_t idx_label(uint64_t i) const { return idx_->labels.bytes[i]; }

  // Every record of `source`, in order, equals the first records of the IDX files.
  void expect_matches_idx(const SampleSource& source, uint64_t count) {
    ASSERT_EQ(source.total_records(), count);
    uint64_t i = 0;
    for_each_record(
        source,
        [&](const SegmentData& data, size_t at) {
          Example e = source.example(data, at);
          if (!e.bytes("image") || !e.int64s("label")) {
            ADD_FAILURE() << "record " << i << " lacks image/label";
            return;
          }
          EXPECT_TRUE(e.bytes("image")->at(0) == idx_pixels(i)) << "record " << i;
          EXPECT_EQ(e.int64s("label")->at(0), idx_label(i)) << "record " << i;
          Sample sample;
          source.decode(data, at, DecodeOptions{}, 0, &sample);
          ASSERT_EQ(sample.data.size(), 784u);
          EXPECT_EQ(sample.label, idx_label(i));
          EXPECT_FLOAT_EQ(sample.data[300], float(uint8_t(idx_pixels(i)[300])) / 255.0f)
              << "record " << i;
          ++i;
        },
        97);  // an odd block size: segments cross the HDF5 chunks
    EXPECT_EQ(i, count);
  }

  const MnistSplit* idx_ = nullptr;
  TempDir dir_;
};

TEST_F(SourceTest, Hdf5WrittenByH5pyMatchesTheIdxFiles) {
  std::string h5 = dir_ / "t.h5";
  write_reference(fmt::format("h5 {} {} {} --count 1000 --chunk 64", h5, kImages, kLabels));
  EXPECT_EQ(detect_format(h5), SourceFormat::kHdf5);
  auto source = open_source({{h5}});
  expect_matches_idx(*source, 1000);
  EXPECT_EQ(source->align_block(256), 256u);  // already a multiple of the 64-row chunks
  EXPECT_EQ(source->align_block(100), 128u);
}

TEST_F(SourceTest, Hdf5FloatImagesAreUsedUnscaled) {
  std::string h5 = dir_ / "f.h5";
  write_reference(fmt::format("h5 {} {} {} --count 50 --float", h5, kImages, kLabels));
  auto source = open_source({{h5}});
  SegmentData data = source->read({0, 0, 50});
  Sample sample;
  source->decode(data, 7, DecodeOptions{}, 0, &sample);
  // h5py stored float32(u8) / 255 computed in float32; the reader must not scale again.
  EXPECT_EQ(sample.data[300], float(uint8_t(idx_pixels(7)[300])) / 255.0f);
  EXPECT_EQ(sample.label, idx_label(7));
}

TEST_F(SourceTest, LmdbWrittenByThePythonModuleMatchesTheIdxFiles) {
  std::string db = dir_ / "t.lmdb";
  write_reference(fmt::format("lmdb {} {} {} --count 1000", db, kImages, kLabels));
  EXPECT_EQ(detect_format(db), SourceFormat::kLmdb);
  expect_matches_idx(*open_source({{db}}), 1000);
}

TEST_F(SourceTest, ConvertersRoundTripThroughEveryFormat) {
  auto out = [&](const std::string& name, SourceFormat f, size_t shards) {
    return ShardOutput{dir_.str(), name, shards, {}, f};
  };
  ConvertResult h5 = convert_idx(kImages, kLabels, out("h5", SourceFormat::kHdf5, 2));
  ConvertResult db = convert_idx(kImages, kLabels, out("db", SourceFormat::kLmdb, 1));
  EXPECT_EQ(h5.records, 10000u);
  EXPECT_EQ(db.records, 10000u);
  // hdf5 (2 files, round robin) -> records -> lmdb -> hdf5: still the IDX data.
  SourceSpec h5_files = find_split(dir_.str(), "h5");
  ASSERT_EQ(h5_files.paths.size(), 2u);
  ConvertResult rec = convert_dataset(h5_files, out("rec", SourceFormat::kRecords, 1));
  ConvertResult db2 = convert_dataset({{rec.index_path}}, out("db2", SourceFormat::kLmdb, 1));
  ConvertResult h52 = convert_dataset({{db2.index_path}}, out("h52", SourceFormat::kHdf5, 1));
  // Round robin over 2 files: file k holds records k, k+2, ...; the reference
  // order of everything converted from it is file 0 then file 1.
  std::vector<uint64_t> order;
  for (uint64_t k = 0; k < 2; ++k)
    for (uint64_t i = k; i < 10000; i += 2) order.push_back(i);
  auto source = open_source({{h52.index_path}});
  uint64_t n = 0, wrong = 0;
  for_each_record(*source, [&](const SegmentData& data, size_t at) {
    Example e = source->example(data, at);
    if (e.bytes("image")->at(0) != idx_pixels(order[n]) ||
        e.int64s("label")->at(0) != idx_label(order[n]))
      ++wrong;
    ++n;
  });
  EXPECT_EQ(n, 10000u);
  EXPECT_EQ(wrong, 0u) << "records differ from the IDX files after four conversions";
  expect_matches_idx(*open_source({{db.index_path}}), 10000);
}

// Identity of a decoded sample: its pixels and label.
using Key = std::pair<std::vector<float>, int64_t>;

std::vector<Key> epoch_of(Loader& p, uint64_t epoch) {
  std::vector<Key> out;
  p.start_epoch(epoch);
  while (auto batch = p.next())
    for (size_t i = 0; i < batch->size(); ++i)
      out.emplace_back(
          std::vector<float>(batch->data.begin() + i * 784, batch->data.begin() + (i + 1) * 784),
          batch->labels[i]);
  return out;
}

TEST_F(SourceTest, LoaderOverHdf5GivesTheSameBatchesAsRecordShards) {
  ConvertResult h5 = convert_idx(kImages, kLabels, {dir_.str(), "h", 1, {}, SourceFormat::kHdf5});
  ConvertResult rec =
      convert_idx(kImages, kLabels, {dir_.str(), "r", 1, {}, SourceFormat::kRecords});
  ConvertResult db = convert_idx(kImages, kLabels, {dir_.str(), "l", 1, {}, SourceFormat::kLmdb});
  auto build = [](const std::string& path) {
    return LoaderBuilder(path).rank(1, 3).seed(9).batch(64).shuffle(500).threads(2).build();
  };
  Loader a = build(h5.index_path), b = build(rec.index_path), c = build(db.index_path);
  std::vector<Key> from_rec = epoch_of(b, 2);
  EXPECT_EQ(epoch_of(a, 2), from_rec);
  EXPECT_EQ(epoch_of(c, 2), from_rec);
  EXPECT_EQ(from_rec.size(), 3334u);  // ceil(10000 / 3), kPad
}

TEST_F(SourceTest, RanksSplitHdf5AndLmdbWithEqualBatchCounts) {
  std::string h5 = dir_ / "t.h5", db = dir_ / "t.lmdb";
  write_reference(fmt::format("h5 {} {} {} --count 1000 --chunk 50", h5, kImages, kLabels));
  write_reference(fmt::format("lmdb {} {} {} --count 1000", db, kImages, kLabels));
  for (const std::string& path : {h5, db})
    for (auto assignment : {Assignment::kPartition, Assignment::kSample})
      for (auto remainder : {Remainder::kPad, Remainder::kDrop}) {
        SCOPED_TRACE(
            fmt::format("{} assignment {} remainder {}", path, int(assignment), int(remainder)));
        std::multiset<Key> seen;
        std::set<uint64_t> batches;
        for (int rank = 0; rank < 3; ++rank) {
          Loader p = LoaderBuilder(path)
                         .rank(rank, 3)
                         .assignment(assignment, remainder)
                         .seed(5)
                         .batch(32)
                         .block_records(40)
                         .build();
          batches.insert(p.batches_per_epoch());
          for (Key& k : epoch_of(p, 1)) seen.insert(std::move(k));
        }
        EXPECT_EQ(batches.size(), 1u) << "ranks disagree on the batch count";
        uint64_t per_rank = remainder == Remainder::kPad ? 334 : 333;
        EXPECT_EQ(seen.size(), 3 * per_rank);
        if (assignment == Assignment::kPartition) {
          std::set<Key> distinct(seen.begin(), seen.end());
          // kDrop: all distinct; kPad: 2 records seen twice.
          EXPECT_EQ(distinct.size(), remainder == Remainder::kPad ? 1000u : 999u);
        }
      }
}

// --- bad files: a clear error naming the file and dataset, never a crash ---

std::string open_error(const SourceSpec& spec) {
  try {
    open_source(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(SourceTest, Hdf5MissingDatasetNamesFileAndDatasets) {
  std::string h5 = dir_ / "named.h5";
  write_reference(fmt::format("h5 {} {} {} --count 10 --images-name pics", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("no image dataset '/images'"), std::string::npos) << error;
  EXPECT_NE(error.find("/pics"), std::string::npos) << error;  // what the file has
  SourceSpec renamed{{h5}, "/pics", "/labels"};
  EXPECT_EQ(open_source(renamed)->total_records(), 10u);
}

TEST_F(SourceTest, Hdf5MismatchedLengthsIsAnError) {
  std::string h5 = dir_ / "short.h5";
  write_reference(fmt::format("h5 {} {} {} --count 10 --labels-count 7", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("mismatched lengths: '/images' holds 10 images but '/labels' holds 7"),
            std::string::npos)
      << error;
}

TEST_F(SourceTest, Hdf5UnsupportedDtypeIsAnError) {
  std::string h5 = dir_ / "int.h5";
  write_reference(fmt::format("h5 {} {} {} --count 10 --image-dtype int32", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find("'/images' has unsupported dtype int32"), std::string::npos) << error;
}

// The fuzzer's find: a chunk shape of 4 GiB made libhdf5 calloc 4 GiB for
// the first read. A chunk past 256 MiB is refused at open, naming the dataset.
TEST_F(SourceTest, Hdf5HugeChunkIsRefusedBeforeAnyRead) {
  std::string h5 = dir_ / "huge-chunk.h5";
  // 400000 rows of 28x28 bytes: a 299 MiB chunk, never written (so the file is small).
  write_reference(
      fmt::format("h5 {} {} {} --count 10 --empty-chunk-rows 400000", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("dataset '/images' has chunks of more than 256 MiB"), std::string::npos)
      << error;
}

TEST_F(SourceTest, Hdf5LabelsNeverWrittenAreRefusedNotReadAsTheFillValue) {
  std::string h5 = dir_ / "no-labels.h5";
  write_reference(fmt::format("h5 {} {} {} --count 10 --unwritten-labels", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find("dataset '/labels' promises 40 bytes but the file stores 0"),
            std::string::npos)
      << error;
}

TEST_F(SourceTest, Hdf5ChunksNeverWrittenAreRefused) {
  std::string h5 = dir_ / "part.h5";
  // 10 rows in chunks of 2, the first 5 written: chunks 0-2 stored, 3-4 not.
  write_reference(
      fmt::format("h5 {} {} {} --count 10 --chunk 2 --written-rows 5", h5, kImages, kLabels));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find("dataset '/images' stores 3 of the 5 chunks its shape needs"),
            std::string::npos)
      << error;
}

TEST_F(SourceTest, Hdf5ExternalStorageIsRefused) {
  std::string h5 = dir_ / "external.h5";
  write_reference(fmt::format("h5 {} {} {} --count 10 --external-images {}", h5, kImages, kLabels,
                              std::string(dir_ / "pixels.raw")));
  std::string error = open_error({{h5}});
  EXPECT_NE(error.find("dataset '/images' keeps its data in external files"), std::string::npos)
      << error;
}

TEST_F(SourceTest, Hdf5TruncatedFileIsAnErrorNamingIt) {
  ConvertResult h5 = convert_idx(kImages, kLabels, {dir_.str(), "cut", 1, {}, SourceFormat::kHdf5});
  std::string bytes = testing::read_file(h5.index_path);
  testing::write_file(h5.index_path, bytes.substr(0, bytes.size() / 2));
  std::string error = open_error({{h5.index_path}});
  EXPECT_NE(error.find(h5.index_path), std::string::npos) << error;
  EXPECT_NE(error.find("truncated or corrupt"), std::string::npos) << error;
}

TEST_F(SourceTest, Hdf5CorruptChunkIsABadRecordOrSkipped) {
  ConvertResult h5 = convert_idx(kImages, kLabels, {dir_.str(), "bad", 1, {}, SourceFormat::kHdf5});
  std::string bytes = testing::read_file(h5.index_path);
  // Pixel data of the middle of the file: flip bytes inside one chunk; its
  // Fletcher-32 checksum no longer matches.
  for (size_t i = 0; i < 16; ++i) bytes[bytes.size() / 2 + i] ^= 0x5a;
  testing::write_file(h5.index_path, bytes);
  Loader strict = LoaderBuilder(h5.index_path).batch(100).shuffle(0).build();
  strict.start_epoch(0);
  try {
    while (strict.next()) {
    }
    FAIL() << "a corrupt chunk was read without an error";
  } catch (const BadRecord& e) {
    EXPECT_EQ(e.file(), h5.index_path + " (/images)");
    EXPECT_NE(std::string(e.what()).find("HDF5 read failed"), std::string::npos) << e.what();
  }
  Loader lenient =
      LoaderBuilder(h5.index_path).batch(100).shuffle(0).bad_data(BadDataPolicy::kSkip).build();
  uint64_t samples = 0;
  lenient.start_epoch(0);
  while (auto batch = lenient.next()) samples += batch->size();
  SkipReport skipped = lenient.skip_report();
  EXPECT_GT(skipped.skipped, 0u);
  EXPECT_LE(skipped.skipped, 256u);  // at most the one 256-row chunk
  EXPECT_EQ(samples + skipped.skipped, 10000u);
}

TEST_F(SourceTest, NotAnHdf5FileIsAnError) {
  std::string path = dir_ / "junk.h5";
  testing::write_file(path, std::string(4096, 'x'));
  std::string error = open_error({{path}});
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("not a readable HDF5 file"), std::string::npos) << error;
}

TEST_F(SourceTest, LmdbErrorsNameThePath) {
  std::string empty = dir_ / "empty";
  fs::create_directories(empty);
  EXPECT_NE(open_error({{empty}}).find("without data.mdb"), std::string::npos);
  std::string junk = dir_ / "junk.lmdb";
  fs::create_directories(junk);
  testing::write_file(junk + "/data.mdb", std::string(8192, '\x07'));
  std::string error = open_error({{junk}});
  EXPECT_NE(error.find(junk), std::string::npos) << error;
  EXPECT_NE(error.find("not a readable LMDB environment"), std::string::npos) << error;
}

TEST_F(SourceTest, MixedFormatsAreRefused) {
  std::string h5 = dir_ / "m.h5", db = dir_ / "m.lmdb";
  write_reference(fmt::format("h5 {} {} {} --count 5", h5, kImages, kLabels));
  write_reference(fmt::format("lmdb {} {} {} --count 5", db, kImages, kLabels));
  EXPECT_NE(open_error({{h5, db}}).find("mixes formats"), std::string::npos);
}

}  // namespace
}  // namespace lockstep::data
