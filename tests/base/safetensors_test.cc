// safetensors without LibTorch: what lockstep writes is read back by a
// reader written here from the format's description (8 little-endian length
// bytes, a JSON header parsed by nlohmann directly, packed data), not by
// lockstep's parser; every malformed header is refused naming its problem.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/base/safetensors.h"

namespace lockstep {
namespace {

// ---- the independent reader ------------------------------------------------
struct RefTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  std::string bytes;
};
struct RefFile {
  uint64_t header_length = 0;
  std::string header;  // the N bytes after the length
  std::map<std::string, RefTensor> tensors;
  std::map<std::string, std::string> metadata;
  bool has_metadata_key = false;
};

RefFile reference_read(const std::string& file) {
  RefFile out;
  for (int i = 0; i < 8; ++i) out.header_length |= uint64_t(uint8_t(file.at(i))) << (8 * i);
  out.header = file.substr(8, out.header_length);
  const size_t data = 8 + out.header_length;
  const nlohmann::json json = nlohmann::json::parse(out.header);
  for (const auto& [name, v] : json.items()) {
    if (name == "__metadata__") {
      out.has_metadata_key = true;
      out.metadata = v.get<std::map<std::string, std::string>>();
      continue;
    }
    uint64_t b = v.at("data_offsets").at(0), e = v.at("data_offsets").at(1);
    out.tensors[name] = {v.at("dtype"), v.at("shape").get<std::vector<int64_t>>(), b,
                         file.substr(data + b, e - b)};
  }
  return out;
}

// ---- helpers ---------------------------------------------------------------
std::string pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 37 + seed * 11 + 1) & 0xff);
  return s;
}

SafetensorsView view(const std::string& name, SafetensorsDtype dtype, std::vector<int64_t> shape,
                     const std::string& bytes) {
  return {name, dtype, std::move(shape), bytes.data(), bytes.size()};
}

// A file from a header text and data bytes, as a hand-made (possibly broken) file.
std::string file_of(const std::string& json, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + data;
}

SafetensorsHeader parse(const std::string& file) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(file.data()), file.size());
}

void expect_refused(const std::string& file, const std::string& message) {
  try {
    parse(file);
    ADD_FAILURE() << "accepted; expected a refusal naming: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << message;
  }
}

const std::vector<SafetensorsDtype> kAll = {
    SafetensorsDtype::F64, SafetensorsDtype::F32, SafetensorsDtype::F16, SafetensorsDtype::BF16,
    SafetensorsDtype::I64, SafetensorsDtype::I32, SafetensorsDtype::I16, SafetensorsDtype::I8,
    SafetensorsDtype::U8,  SafetensorsDtype::BOOL};

// ---- round trips -----------------------------------------------------------
TEST(Safetensors, EveryDtypeRoundTripsThroughAnIndependentReader) {
  const std::map<std::string, size_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},
                                               {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
                                               {"U8", 1},  {"BOOL", 1}};
  std::vector<std::string> data;
  std::vector<SafetensorsView> views;
  for (size_t k = 0; k < kAll.size(); ++k) {
    std::string name(safetensors_dtype_name(kAll[k]));
    ASSERT_EQ(safetensors_dtype_size(kAll[k]), sizes.at(name));
    ASSERT_EQ(safetensors_dtype_from_name(name), kAll[k]);
    data.push_back(pattern(6 * sizes.at(name), int(k)));
  }
  for (size_t k = 0; k < kAll.size(); ++k)
    views.push_back(view("t." + std::to_string(k), kAll[k], {2, 3}, data[k]));
  std::string file = serialize_safetensors(views, {{"format", "pt"}});
  RefFile ref = reference_read(file);
  ASSERT_EQ(ref.tensors.size(), kAll.size());
  for (size_t k = 0; k < kAll.size(); ++k) {
    const RefTensor& t = ref.tensors.at("t." + std::to_string(k));
    EXPECT_EQ(t.dtype, safetensors_dtype_name(kAll[k]));
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.bytes, data[k]) << t.dtype;
  }
  // Our parser agrees with the reference reader, in the order written.
  SafetensorsHeader header = parse(file);
  ASSERT_EQ(header.entries.size(), kAll.size());
  for (size_t k = 0; k < kAll.size(); ++k) {
    const SafetensorsEntry& e = header.entries[k];
    EXPECT_EQ(e.name, "t." + std::to_string(k));
    EXPECT_EQ(e.dtype, kAll[k]);
    EXPECT_EQ(e.begin, ref.tensors.at(e.name).begin);
    EXPECT_EQ(file.substr(header.data_start + e.begin, e.end - e.begin), data[k]);
  }
  EXPECT_EQ(header.data_start, 8 + ref.header_length);
}

TEST(Safetensors, ScalarsAndEmptyTensors) {
  std::string one = pattern(4, 1), none;
  std::vector<SafetensorsView> views = {view("scalar", SafetensorsDtype::F32, {}, one),
                                        view("empty", SafetensorsDtype::F64, {0, 3}, none),
                                        view("empty2", SafetensorsDtype::I8, {5, 0}, none)};
  std::string file = serialize_safetensors(views, {});
  RefFile ref = reference_read(file);
  EXPECT_EQ(ref.tensors.at("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(ref.tensors.at("scalar").bytes, one);
  EXPECT_EQ(ref.tensors.at("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(ref.tensors.at("empty").bytes, "");
  SafetensorsHeader header = parse(file);
  ASSERT_EQ(header.entries.size(), 3u);
  EXPECT_TRUE(header.entries[0].shape.empty());
  EXPECT_EQ(header.entries[1].begin, header.entries[1].end);
  EXPECT_EQ(header.entries[2].begin, header.entries[2].end);
  // A file of no tensors is the reference's "{}" padded to 8 bytes.
  std::string nothing = serialize_safetensors({}, {});
  EXPECT_EQ(nothing, file_of("{}      "));
  EXPECT_TRUE(parse(nothing).entries.empty());
}

TEST(Safetensors, MetadataRoundTripsAndIsOmittedWhenEmpty) {
  std::string a = pattern(8, 2);
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "1200"}, {"note", "ünï \"q\""}};
  std::string file = serialize_safetensors({view("a", SafetensorsDtype::I64, {1}, a)}, metadata);
  EXPECT_EQ(reference_read(file).metadata, metadata);
  EXPECT_EQ(parse(file).metadata, metadata);
  std::string bare = serialize_safetensors({view("a", SafetensorsDtype::I64, {1}, a)}, {});
  EXPECT_FALSE(reference_read(bare).has_metadata_key);
  EXPECT_TRUE(parse(bare).metadata.empty());
}

TEST(Safetensors, DataIsAlignedAndTheHeaderPaddedWithSpaces) {
  // Odd byte counts first in the caller's order: the writer still puts each
  // tensor at a multiple of its element size.
  std::string b = pattern(3, 1), h = pattern(6, 2), d = pattern(16, 3), f = pattern(4, 4);
  std::vector<SafetensorsView> views = {
      view("flag", SafetensorsDtype::BOOL, {3}, b), view("half", SafetensorsDtype::F16, {3}, h),
      view("double", SafetensorsDtype::F64, {2}, d), view("float", SafetensorsDtype::F32, {1}, f)};
  for (const std::string& name : {std::string("x"), std::string("longer_name_")}) {
    views[0].name = name;
    std::string file = serialize_safetensors(views, {});
    RefFile ref = reference_read(file);
    EXPECT_EQ((8 + ref.header_length) % 8, 0u);
    // The JSON ends at its last '}'; only spaces follow, fewer than 8.
    size_t json_end = ref.header.rfind('}') + 1;
    EXPECT_TRUE(nlohmann::json::accept(ref.header.substr(0, json_end)));
    EXPECT_EQ(ref.header.substr(json_end), std::string(ref.header.size() - json_end, ' '));
    EXPECT_LT(ref.header.size() - json_end, 8u);
    EXPECT_EQ(ref.tensors.at("double").begin % 8, 0u);
    EXPECT_EQ(ref.tensors.at("float").begin % 4, 0u);
    EXPECT_EQ(ref.tensors.at("half").begin % 2, 0u);
    EXPECT_EQ(ref.tensors.at(name).bytes, b);
  }
}

TEST(Safetensors, StreamedWriteEqualsTheInMemoryOneAndItsHeaderReadsFromTheFd) {
  std::string a = pattern(24, 5), c = pattern(2, 6);
  std::vector<SafetensorsView> views = {view("a", SafetensorsDtype::F32, {2, 3}, a),
                                        view("c", SafetensorsDtype::BF16, {1}, c)};
  int fd = ::memfd_create("safetensors_test", 0);
  ASSERT_GE(fd, 0);
  write_safetensors(fd, "memfd", views, {{"k", "v"}});
  std::string bytes = serialize_safetensors(views, {{"k", "v"}});
  std::string back(bytes.size() + 1, '\0');
  EXPECT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(bytes.size()));
  back.resize(bytes.size());
  EXPECT_EQ(back, bytes);
  SafetensorsHeader header = read_safetensors_header(fd, "memfd");
  EXPECT_EQ(header.entries, parse(bytes).entries);
  EXPECT_EQ(header.metadata.at("k"), "v");
  // The fd reader names the file in its refusals.
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes.size() - 1)), 0);
  try {
    read_safetensors_header(fd, "memfd");
    ADD_FAILURE() << "a truncated file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("safetensors: memfd: "), std::string::npos) << e.what();
  }
  ::close(fd);
}

TEST(Safetensors, WriterRefusesWhatNoReaderCouldLoad) {
  std::string four = pattern(4, 0);
  auto refused = [](const std::vector<SafetensorsView>& views, const std::string& message) {
    try {
      serialize_safetensors(views, {});
      ADD_FAILURE() << "written; expected a refusal naming: " << message;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused(
      {view("a", SafetensorsDtype::F32, {1}, four), view("a", SafetensorsDtype::F32, {1}, four)},
      "two tensors are named 'a'");
  refused({view("__metadata__", SafetensorsDtype::F32, {1}, four)}, "reserves for metadata");
  refused({view("a", SafetensorsDtype::F32, {2}, four)},
          "has 4 bytes of data, but shape [2] of F32 needs 8");
  refused({view("a", SafetensorsDtype::F32, {-1}, four)}, "negative or overflowing shape [-1]");
  refused({view("bad\xff", SafetensorsDtype::F32, {1}, four)}, "not UTF-8");
}

// ---- malformed files -------------------------------------------------------
TEST(Safetensors, RefusesBadHeaderLengths) {
  expect_refused("1234567", "7 bytes, fewer than the 8");
  std::string huge(8, '\0');
  uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  expect_refused(huge + "{}", "header length 100000001 is over the limit of 100000000");
  std::string past = file_of("{}");
  past[0] = 9;
  expect_refused(past, "header length 9 runs past the end of the file (10 bytes)");
  std::string max(8, '\xff');
  expect_refused(max + "{}", "over the limit");
}

TEST(Safetensors, RefusesHeadersThatAreNotAnObjectOfEntries) {
  expect_refused(file_of("{\"a\": "), "the header is not JSON");
  expect_refused(file_of(""), "the header is not JSON");
  expect_refused(file_of("{\"a\xff\": 1}"), "the header is not JSON");
  expect_refused(file_of("[1, 2]"), "the header is a JSON array, not an object of tensors");
  expect_refused(file_of("{\"a\": 3}"), "tensor 'a' is a JSON number, not an object with dtype");
  expect_refused(file_of(R"({"a": {"shape": [], "data_offsets": [0, 4]}})", "1234"),
                 "tensor 'a' has no \"dtype\"");
  expect_refused(file_of(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", "1234"),
                 "tensor 'a' has no \"shape\"");
  expect_refused(file_of(R"({"a": {"dtype": "F32", "shape": []}})", "1234"),
                 "tensor 'a' has no \"data_offsets\"");
  expect_refused(file_of(R"({"a": {"dtype": 7, "shape": [], "data_offsets": [0, 4]}})", "1234"),
                 "tensor 'a': \"dtype\" is not a string");
  expect_refused(file_of(R"({"a": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", "1234"),
                 "tensor 'a': \"shape\" is not an array");
  expect_refused(file_of(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0]}})", "1234"),
                 "\"data_offsets\" is not an array [begin, end]");
  expect_refused(
      file_of(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, "4"]}})", "1234"),
      "tensor 'a': offset \"4\" is not an integer");
  expect_refused(
      file_of(R"({"a": {"dtype": "F32", "shape": [[[1]]], "data_offsets": [0, 4]}})", "1234"),
      "header nests deeper than 3 levels");
}

// One entry `a` with the given fields, over `data`.
std::string one_entry(const std::string& dtype, const std::string& shape,
                      const std::string& offsets, const std::string& data) {
  return file_of("{\"a\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape +
                     ", \"data_offsets\": " + offsets + "}}",
                 data);
}

TEST(Safetensors, RefusesUnknownDtypesByName) {
  for (const char* dtype : {"U16", "F8_E4M3", "float32", "f32", "U64"})
    expect_refused(
        one_entry(dtype, "[]", "[0, 4]", "1234"),
        std::string("tensor 'a': dtype '") + dtype +
            "' is not supported (lockstep reads F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

TEST(Safetensors, RefusesBadShapes) {
  expect_refused(one_entry("F32", "[-2]", "[0, 8]", "12345678"),
                 "tensor 'a': negative dimension -2");
  expect_refused(one_entry("F32", "[2.5]", "[0, 8]", "12345678"),
                 "dimension 2.5 is not an integer");
  expect_refused(one_entry("F32", "[9223372036854775808]", "[0, 0]", ""),
                 "dimension 9223372036854775808 overflows int64");
  // The product overflows before any allocation could be asked for.
  expect_refused(one_entry("F32", "[4294967296, 4294967296]", "[0, 0]", ""),
                 "tensor 'a': shape [4294967296, 4294967296] overflows");
  expect_refused(one_entry("F32", "[2]", "[0, 4]", "1234"),
                 "tensor 'a': data_offsets [0, 4) hold 4 bytes, but shape [2] of F32 needs 8");
}

TEST(Safetensors, RefusesOffsetsOutsideTheFileBeforeAllocating) {
  // A terabyte claimed by a 60-byte file is refused from the header alone.
  expect_refused(one_entry("F32", "[274877906944]", "[0, 1099511627776]", "1234"),
                 "tensor 'a': data_offsets [0, 1099511627776) run past the 4 data bytes");
  expect_refused(one_entry("F32", "[]", "[4, 0]", "1234"),
                 "tensor 'a': data_offsets end 0 < begin 4");
  expect_refused(one_entry("F32", "[]", "[-4, 0]", "1234"), "tensor 'a': negative offset -4");
  expect_refused(one_entry("F32", "[]", "[0, 18446744073709551616]", "1234"), "is not an integer");
}

TEST(Safetensors, RefusesOverlapsHolesAndTrailingBytes) {
  const std::string f32 = R"("dtype": "F32", "shape": [2])";
  expect_refused(file_of("{\"a\": {" + f32 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32 +
                             R"(, "data_offsets": [4, 12]}})",
                         std::string(12, 'x')),
                 "tensors 'a' and 'b' overlap (bytes [4, 8))");
  expect_refused(file_of("{\"a\": {" + f32 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32 +
                             R"(, "data_offsets": [12, 20]}})",
                         std::string(20, 'x')),
                 "data bytes [8, 12) before tensor 'b' belong to no tensor (a hole)");
  expect_refused(one_entry("F32", "[]", "[0, 4]", "12345678"),
                 "data bytes [4, 8) after the last tensor belong to no tensor");
  expect_refused(one_entry("F32", "[]", "[4, 8]", "12345678"),
                 "data bytes [0, 4) before tensor 'a' belong to no tensor (a hole)");
  // Entries may come in any order in the header; ties of empty tensors are fine.
  SafetensorsHeader ok = parse(file_of(
      "{\"b\": {" + f32 +
          R"(, "data_offsets": [8, 16]}, "e": {"dtype": "I8", "shape": [0], "data_offsets": [8, 8]}, "a": {)" +
          f32 + R"(, "data_offsets": [0, 8]}})",
      std::string(16, 'x')));
  ASSERT_EQ(ok.entries.size(), 3u);
  EXPECT_EQ(ok.entries[0].name, "b");
  EXPECT_EQ(ok.entries[2].name, "a");
}

TEST(Safetensors, RefusesDuplicatesAndNonStringMetadata) {
  const std::string a = R"("a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]})";
  expect_refused(file_of("{" + a + ", " + a + "}", "x"), "duplicate tensor name 'a'");
  expect_refused(
      file_of(R"({"a": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})",
              "x"),
      "duplicate key 'dtype'");
  expect_refused(file_of(R"({"__metadata__": {"k": 1}, )" + a + "}", "x"),
                 "metadata 'k' is a JSON number, not a string");
  expect_refused(file_of(R"({"__metadata__": ["k"], )" + a + "}", "x"),
                 "\"__metadata__\" is a JSON array, not an object of strings");
  expect_refused(file_of(R"({"__metadata__": {"k": "v", "k": "w"}, )" + a + "}", "x"),
                 "duplicate key 'k'");
  std::string name(5000, 'n');
  expect_refused(file_of("{\"" + name + "\": 1}"), "' (5000 bytes) is a JSON number");
}

// Regression: the parser callback that refused duplicates made nlohmann rescan
// the header object after every entry, so a header of a million tensors took
// over ten minutes (Note [Header scan] in src/base/safetensors.cc). With 100k
// tensors this test took 26 s with that parser and 0.8 s with the scan: it
// pins the order of many entries, and a quadratic parser or writer shows as
// a test that takes minutes.
TEST(Safetensors, HeadersOfManyTensorsKeepTheirOrder) {
  constexpr int kCount = 100'000;
  std::string one = "x";
  std::vector<SafetensorsView> views;
  views.reserve(kCount);
  for (int i = kCount; i > 0; --i)  // descending: the order is not sorted order
    views.push_back(view("t" + std::to_string(i), SafetensorsDtype::U8, {i % 3 == 0 ? 1 : 0},
                         i % 3 == 0 ? one : std::string()));
  std::string file = serialize_safetensors(views, {});
  SafetensorsHeader header = parse(file);
  ASSERT_EQ(header.entries.size(), views.size());
  for (size_t i = 0; i < views.size(); ++i) ASSERT_EQ(header.entries[i].name, views[i].name) << i;
  EXPECT_EQ(reference_read(file).tensors.size(), views.size());
}

TEST(Safetensors, AcceptsAnUnpaddedHeaderFromAnotherWriter) {
  // The reference's own example: a 60-byte header, data not 8-aligned.
  std::string json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  SafetensorsHeader h = parse(file_of(json, std::string(16, '\0')));
  ASSERT_EQ(h.entries.size(), 1u);
  EXPECT_EQ(h.entries[0], (SafetensorsEntry{"test", SafetensorsDtype::I32, {2, 2}, 0, 16}));
  EXPECT_EQ(h.data_start, 8 + json.size());
}

}  // namespace
}  // namespace lockstep
