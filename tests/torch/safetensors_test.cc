// safetensors files of LibTorch tensors: bit-exact round trips of every dtype,
// the sharded layout read back through its index by nlohmann directly, and
// Python reading lockstep's files and writing files lockstep reads, both
// with a reader written from the format (tests/torch/safetensors_reader.py).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/torch/safetensors.h"
#include "support/scratch.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  return lockstep::testing::scratch_folder("lockstep-safetensors", name).string();
}

const std::vector<::torch::ScalarType> kDtypes = {
    ::torch::kDouble, ::torch::kFloat, ::torch::kHalf, ::torch::kBFloat16, ::torch::kLong,
    ::torch::kInt,    ::torch::kShort, ::torch::kChar, ::torch::kByte,     ::torch::kBool};

// Random bits of every pattern (NaN payloads, denormals, -0) for `dtype`.
::torch::Tensor random_bits(::torch::ScalarType dtype, std::vector<int64_t> shape) {
  if (dtype == ::torch::kBool) return ::torch::randint(0, 2, shape).to(::torch::kBool);
  auto t = ::torch::empty(shape, ::torch::dtype(dtype));
  auto bytes = t.view({-1}).view(::torch::kByte);
  bytes.copy_(::torch::randint(0, 256, bytes.sizes(), ::torch::dtype(::torch::kByte)));
  return t;
}

// Equal as bytes: NaN == NaN when the bits are the same.
void expect_bit_equal(const ::torch::Tensor& got, const ::torch::Tensor& want,
                      const std::string& name) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << name;
  ASSERT_EQ(got.sizes(), want.sizes()) << name;
  auto a = got.contiguous().view({-1}).view(::torch::kByte);
  auto b = want.contiguous().view({-1}).view(::torch::kByte);
  if (want.scalar_type() == ::torch::kBool)
    a = got.contiguous().view({-1}), b = want.contiguous().view({-1});
  EXPECT_TRUE(::torch::equal(a, b)) << name;
}

template <typename F>
void expect_error(F&& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(TorchSafetensors, EveryDtypeRoundTripsBitExactInOrder) {
  ::torch::manual_seed(3);
  NamedTensors tensors;
  for (auto dtype : kDtypes)
    tensors.emplace_back(std::string("w.") + c10::toString(dtype), random_bits(dtype, {3, 5}));
  std::string path = scratch("dtypes") + "/model.safetensors";
  save_safetensors(path, tensors, {{"format", "pt"}});
  SafetensorsContents back = load_safetensors(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    expect_bit_equal(back.tensors[i].second, tensors[i].second, tensors[i].first);
  }
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  std::vector<TensorInfo> infos = read_safetensors_info(path);
  ASSERT_EQ(infos.size(), tensors.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    EXPECT_EQ(infos[i].name, tensors[i].first);
    EXPECT_EQ(infos[i].dtype, tensors[i].second.scalar_type());
    EXPECT_EQ(infos[i].sizes, tensors[i].second.sizes().vec());
  }
}

TEST(TorchSafetensors, ScalarsEmptyAndNonContiguousTensors) {
  auto base = ::torch::arange(24, ::torch::kFloat).reshape({4, 6});
  NamedTensors tensors = {
      {"scalar", ::torch::tensor(2.5, ::torch::kDouble)},
      {"empty", ::torch::empty({0, 3}, ::torch::kHalf)},
      {"transposed", base.t()},
      {"strided", base.index({::torch::indexing::Slice(), ::torch::indexing::Slice(1, 6, 2)})},
      {"expanded", ::torch::arange(3, ::torch::kLong).expand({4, 3})},
      {"offset", base.view({-1}).narrow(0, 5, 7)},
  };
  ASSERT_FALSE(tensors[2].second.is_contiguous());
  std::string path = scratch("shapes") + "/t.safetensors";
  save_safetensors(path, tensors);
  SafetensorsContents back = load_safetensors(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    expect_bit_equal(back.tensors[i].second, tensors[i].second.contiguous(), tensors[i].first);
    EXPECT_TRUE(back.tensors[i].second.is_contiguous());
  }
  EXPECT_EQ(back.tensors[0].second.dim(), 0);
  EXPECT_EQ(back.tensors[0].second.item<double>(), 2.5);
  // The file is exactly header + data: nothing between, nothing after.
  uint64_t data = 8 + 0 + 24 * 4 + 12 * 4 + 12 * 8 + 7 * 4;
  SafetensorsHeader header = [&] {
    int fd = ::open(path.c_str(), O_RDONLY);
    auto h = read_safetensors_header(fd, path);
    ::close(fd);
    return h;
  }();
  EXPECT_EQ(fs::file_size(path), header.data_start + data);
  EXPECT_EQ(header.data_start % 8, 0u);
}

TEST(TorchSafetensors, RefusesUnsupportedTensorsByNameBeforeWriting) {
  std::string dir = scratch("refused");
  std::string path = dir + "/x.safetensors";
  auto good = ::torch::ones({2});
  expect_error(
      [&] {
        save_safetensors(path,
                         {{"ok", good}, {"phase", ::torch::ones({2}, ::torch::kComplexFloat)}});
      },
      "tensor 'phase' has dtype ComplexFloat");
  expect_error(
      [&] {
        save_safetensors(path, {{"adj", ::torch::eye(3).to_sparse()}});
      },
      "tensor 'adj' is sparse");
  auto q = ::torch::quantize_per_tensor(::torch::ones({2}), 0.1, 0, ::torch::kQInt8);
  expect_error([&] { save_safetensors(path, {{"q", q}}); }, "tensor 'q' is quantized");
  expect_error(
      [&] {
        save_safetensors(path, {{"u", ::torch::Tensor()}});
      },
      "tensor 'u' is undefined");
  expect_error(
      [&] {
        save_safetensors(path, {{"a", good}, {"a", good}});
      },
      "two tensors are named 'a'");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir)) << "a refused save left a temporary file";
}

TEST(TorchSafetensors, SaveReplacesAtomicallyAndLeavesNoTemporaryFile) {
  std::string dir = scratch("atomic");
  std::string path = dir + "/m.safetensors";
  save_safetensors(path, {{"a", ::torch::zeros({4})}});
  save_safetensors(path, {{"b", ::torch::ones({2, 2}, ::torch::kInt)}});
  SafetensorsContents back = load_safetensors(path);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].first, "b");
  EXPECT_TRUE(::torch::equal(back.tensors[0].second, ::torch::ones({2, 2}, ::torch::kInt)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(TorchSafetensors, CorruptFilesAreRefusedNamingThePath) {
  std::string dir = scratch("corrupt");
  std::string path = dir + "/c.safetensors";
  save_safetensors(path,
                   {{"a", ::torch::ones({8})}, {"flags", ::torch::ones({3}, ::torch::kBool)}});
  // A BOOL byte of 2 is not a bool.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 1));
    f.put('\x02');
  }
  expect_error([&] { load_safetensors(path); }, "BOOL tensor 'flags' holds byte 2 at element 2");
  fs::resize_file(path, fs::file_size(path) - 1);
  expect_error([&] { load_safetensors(path); },
               "safetensors: " + path +
                   ": tensor 'flags': data_offsets [32, 35) run past the 34 data bytes");
  expect_error([&] { read_safetensors_info(path); }, path);
  expect_error([&] { load_safetensors(dir + "/missing.safetensors"); },
               "cannot open " + dir + "/missing");
  // A header claiming a terabyte in a 100-byte file: refused from the header,
  // before LibTorch is asked for the memory (which would throw c10::Error or
  // be killed by the OOM killer).
  std::string json =
      R"({"big":{"dtype":"F32","shape":[274877906944],"data_offsets":[0,1099511627776]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  std::ofstream(dir + "/huge.safetensors", std::ios::binary) << bytes << json << "1234";
  expect_error([&] { load_safetensors(dir + "/huge.safetensors"); },
               "tensor 'big': data_offsets [0, 1099511627776) run past the 4 data bytes");
}

// ---- sharded --------------------------------------------------------------
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TorchSafetensors, ShardedLayoutFollowsHuggingFaceAndRoundTrips) {
  ::torch::manual_seed(5);
  NamedTensors tensors = {{"embed", ::torch::randn({10, 4})},                       // 160 bytes
                          {"l0.w", ::torch::randn({4, 4})},                         // 64
                          {"l0.b", ::torch::randn({4})},                            // 16
                          {"l1.w", ::torch::randn({4, 4}).to(::torch::kBFloat16)},  // 32
                          {"head", ::torch::randn({40, 4})}};                       // 640: alone
  std::string dir = scratch("sharded") + "/out";
  save_safetensors_sharded(dir, tensors, 128, {{"format", "pt"}});
  // embed | l0.w l0.b l1.w | head
  std::vector<std::string> files = {"model-00001-of-00003.safetensors",
                                    "model-00002-of-00003.safetensors",
                                    "model-00003-of-00003.safetensors"};
  nlohmann::json index = read_json(dir + "/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 160 + 64 + 16 + 32 + 640);
  EXPECT_EQ(index["metadata"]["format"], "pt");
  std::map<std::string, std::string> want = {{"embed", files[0]},
                                             {"l0.w", files[1]},
                                             {"l0.b", files[1]},
                                             {"l1.w", files[1]},
                                             {"head", files[2]}};
  EXPECT_EQ(index["weight_map"].get<decltype(want)>(), want);
  for (const auto& f : files) {
    ASSERT_TRUE(fs::exists(dir + "/" + f)) << f;
    EXPECT_EQ(load_safetensors(dir + "/" + f).metadata.at("format"), "pt");
  }
  EXPECT_EQ(load_safetensors(dir + "/" + files[1]).tensors.size(), 3u);
  SafetensorsContents back = load_safetensors_sharded(dir + "/model.safetensors.index.json");
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    expect_bit_equal(back.tensors[i].second, tensors[i].second, tensors[i].first);
  }
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(TorchSafetensors, ShardedIndexesThatLieAreRefused) {
  std::string dir = scratch("lying");
  save_safetensors_sharded(dir, {{"a", ::torch::ones({2})}, {"b", ::torch::ones({2})}}, 8);
  std::string index_path = dir + "/model.safetensors.index.json";
  nlohmann::json index = read_json(index_path);
  auto write_index = [&](const nlohmann::json& j) { std::ofstream(index_path) << j.dump(); };
  auto edited = index;
  edited["weight_map"]["a"] = "../escape.safetensors";
  write_index(edited);
  expect_error([&] { load_safetensors_sharded(index_path); },
               "not a file name in the index's directory");
  edited = index;
  edited["weight_map"]["a"] = index["weight_map"]["b"];
  write_index(edited);
  expect_error([&] { load_safetensors_sharded(index_path); }, "tensor 'a' is not in its shard");
  edited = index;
  edited["weight_map"].erase("b");
  edited["weight_map"]["c"] = index["weight_map"]["b"];
  write_index(edited);
  expect_error([&] { load_safetensors_sharded(index_path); },
               "holds tensor 'b', which the index does not map to it");
  edited = index;
  edited["metadata"]["total_size"] = 9;
  write_index(edited);
  expect_error([&] { load_safetensors_sharded(index_path); },
               "\"total_size\" 9 disagrees with the 16 bytes");
  write_index(index);
  EXPECT_EQ(load_safetensors_sharded(index_path).tensors.size(), 2u);
  expect_error([&] { save_safetensors_sharded(dir, {}, 0); }, "max_shard_bytes is 0");
}

// ---- Python, with its own reader --------------------------------------------
bool python_torch_works() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

int run_reader(const std::string& mode, const std::string& path) {
  return std::system(
      fmt::format("/usr/bin/python3 {} {} {}", LOCKSTEP_SAFETENSORS_READER, mode, path).c_str());
}

// The values safetensors_reader.py's expected_values() computes the same way.
::torch::Tensor expected_values(::torch::ScalarType dtype, int64_t shift) {
  auto base = ::torch::arange(6, ::torch::kDouble).reshape({2, 3}) - shift;
  if (dtype == ::torch::kBool) return (::torch::arange(6).reshape({2, 3}) + shift) % 2 == 1;
  if (c10::isFloatingType(dtype)) return (base * 0.375).to(dtype);
  return (base * 3 + 20).to(dtype);
}

std::string file_dtype(::torch::ScalarType dtype) {
  return std::string(safetensors_dtype_name(safetensors_dtype_of(::torch::empty({0}, dtype), "x")));
}

TEST(TorchSafetensors, PythonReadsWhatLockstepWrites) {
  if (!python_torch_works()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch here";
  NamedTensors tensors;
  for (auto dtype : kDtypes) tensors.emplace_back(file_dtype(dtype), expected_values(dtype, 2));
  tensors.emplace_back("scalar", ::torch::tensor(2.5f));
  tensors.emplace_back("empty", ::torch::empty({0, 4}, ::torch::kHalf));
  std::string dir = scratch("to-python");
  save_safetensors(dir + "/values.safetensors", tensors, {{"writer", "lockstep"}, {"note", "ü"}});
  EXPECT_EQ(run_reader("check", dir + "/values.safetensors"), 0);
  // A C++ nn::Linear's parameters load into Python's nn.Linear by name.
  ::torch::nn::Linear linear(3, 2);
  {
    ::torch::NoGradGuard no_grad;
    linear->weight.copy_(::torch::arange(6, ::torch::kFloat).reshape({2, 3}) / 10);
    linear->bias.copy_(::torch::tensor({0.5f, -0.5f}));
  }
  NamedTensors state;
  for (const auto& p : linear->named_parameters()) state.emplace_back(p.key(), p.value());
  save_safetensors(dir + "/linear.safetensors", state);
  EXPECT_EQ(run_reader("linear", dir + "/linear.safetensors"), 0);
}

TEST(TorchSafetensors, LockstepReadsWhatPythonWrites) {
  if (!python_torch_works()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch here";
  std::string path = scratch("from-python") + "/py.safetensors";
  ASSERT_EQ(run_reader("write", path), 0);
  SafetensorsContents back = load_safetensors(path);
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"writer", "python"}}));
  std::map<std::string, ::torch::Tensor> by_name(back.tensors.begin(), back.tensors.end());
  ASSERT_EQ(by_name.size(), kDtypes.size() + 2);
  for (auto dtype : kDtypes)
    expect_bit_equal(by_name.at(file_dtype(dtype)), expected_values(dtype, 1), file_dtype(dtype));
  expect_bit_equal(by_name.at("scalar"), ::torch::tensor(-1.25, ::torch::kDouble), "scalar");
  EXPECT_EQ(by_name.at("empty").sizes(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(by_name.at("empty").scalar_type(), ::torch::kInt);
}

}  // namespace
}  // namespace lockstep::torch
