// torch.save state_dict files: bit-exact round trips of every dtype, hostile
// and damaged files refused by name, and, where /usr/bin/python3 has torch,
// the same logits in Python and C++ both ways (state_dict_roundtrip.py).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/fashion_cnn.h"
#include "lockstep/base/error.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/state_dict.h"
#include "temp_files.h"
#include "torch/state_dict_pickle.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;
using detail::PickledTensor;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A pickle opcode stream written as a literal (with its NUL bytes, without the final one).
template <size_t N>
std::string ops(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A torch.save-shaped zip of any pickle and storage records, written by the
// same LibTorch zip writer torch.save uses.
void write_zip(const std::string& path, const std::string& pickle,
               const std::vector<std::pair<std::string, std::string>>& records = {}) {
  std::string bytes;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&bytes](const void* b, size_t n) {
      bytes.append(static_cast<const char*>(b), n);
      return n;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
    writer.writeEndOfFile();
  }
  spit(path, bytes);
}

PickledTensor float_tensor(const std::string& key, int64_t numel, int64_t offset,
                           std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  return PickledTensor{
      "t", key, ::torch::kFloat, numel, offset, std::move(sizes), std::move(strides)};
}

// The message lockstep::Error carries, or "" when `f` does not throw one
// (any other exception fails the test).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

::torch::Tensor random_of(::torch::ScalarType dtype, std::vector<int64_t> sizes) {
  if (dtype == ::torch::kBool) return ::torch::randint(0, 2, sizes).to(::torch::kBool);
  if (::torch::isFloatingType(dtype)) return ::torch::randn(sizes).to(dtype);
  return ::torch::randint(-100, 100, sizes).to(dtype);
}

bool same_bytes(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Each of the ten dtypes the format holds: a 3x5 matrix and a scalar.
NamedTensors one_of_every_dtype() {
  NamedTensors out;
  for (auto dtype :
       {::torch::kFloat, ::torch::kDouble, ::torch::kHalf, ::torch::kBFloat16, ::torch::kLong,
        ::torch::kInt, ::torch::kShort, ::torch::kChar, ::torch::kByte, ::torch::kBool}) {
    out.emplace_back(fmt::format("{}.matrix", c10::toString(dtype)), random_of(dtype, {3, 5}));
    out.emplace_back(fmt::format("{}.scalar", c10::toString(dtype)), random_of(dtype, {}));
  }
  return out;
}

void expect_bit_exact(const NamedTensors& read, const NamedTensors& written) {
  ASSERT_EQ(read.size(), written.size());
  for (size_t k = 0; k < read.size(); ++k) {
    EXPECT_EQ(read[k].first, written[k].first);
    EXPECT_TRUE(same_bytes(read[k].second, written[k].second)) << read[k].first;
  }
}

class StateDictTest : public ::testing::Test {
 protected:
  std::string dir = testing::fresh_dir("state-dict");
  std::string file(const std::string& name) const { return dir + "/" + name; }
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(StateDictTest, EveryDtypeRoundTripsBitExact) {
  ::torch::manual_seed(3);
  NamedTensors written = one_of_every_dtype();
  written.emplace_back("empty", ::torch::zeros({0, 4}));
  written.emplace_back("strided", ::torch::randn({4, 6}).t());  // written contiguous, same values
  write_torch_state_dict(file("all.pt"), written);
  expect_bit_exact(read_torch_state_dict(file("all.pt")), written);
}

TEST_F(StateDictTest, ViewsOfOneStorageKeepOffsetsAndStrides) {
  std::string storage(12 * sizeof(float), '\0');
  for (int k = 0; k < 12; ++k) reinterpret_cast<float*>(storage.data())[k] = static_cast<float>(k);
  auto whole = float_tensor("0", 12, 0, {12}, {1});
  auto middle = float_tensor("0", 12, 2, {2, 2}, {2, 1});
  auto transposed = float_tensor("0", 12, 0, {4, 3}, {1, 4});
  whole.name = "whole", middle.name = "middle", transposed.name = "transposed";
  write_zip(file("views.pt"), detail::pickle_state_dict({whole, middle, transposed}),
            {{"data/0", storage}});
  NamedTensors read = read_torch_state_dict(file("views.pt"));
  ASSERT_EQ(read.size(), 3u);
  auto base = ::torch::arange(12, ::torch::kFloat);
  EXPECT_TRUE(::torch::equal(read[0].second, base));
  EXPECT_TRUE(::torch::equal(read[1].second, base.slice(0, 2, 6).view({2, 2})));
  EXPECT_TRUE(::torch::equal(read[2].second, base.view({3, 4}).t()));
}

TEST_F(StateDictTest, HostileGlobalIsRefusedByName) {
  // os.system('true') as pickle.dumps(...) spells it: GLOBAL, args, REDUCE.
  write_zip(file("evil.pt"), ops("\x80\x02"
                                 "cos\nsystem\n"
                                 "X\x04\0\0\0true"
                                 "\x85R."));
  EXPECT_NE(error_of([&] {
              read_torch_state_dict(file("evil.pt"));
            }).find("global os.system is not allowed"),
            std::string::npos);
}

TEST_F(StateDictTest, UnknownOpcodeAndDeepNestingAreRefused) {
  write_zip(file("inst.pt"), ops("\x80\x02"
                                 "i"
                                 "os\nsystem\n."));
  EXPECT_NE(error_of([&] { read_torch_state_dict(file("inst.pt")); }).find("opcode 0x69"),
            std::string::npos);
  std::string deep = "\x80\x02)" + std::string(200, '\x85') + ".";  // 200 nested 1-tuples
  write_zip(file("deep.pt"), deep);
  EXPECT_NE(error_of([&] { read_torch_state_dict(file("deep.pt")); }).find("nest deeper"),
            std::string::npos);
  write_zip(file("long.pt"), std::string("\x80\x02\x8a\x09") + std::string(9, '\x7f') + ".");
  EXPECT_NE(error_of([&] { read_torch_state_dict(file("long.pt")); }).find("past 64 bits"),
            std::string::npos);
  write_zip(file("list.pt"), ops("\x80\x02]q\x00h\x00"
                                 "a."));  // a list in itself
  EXPECT_NE(error_of([&] { read_torch_state_dict(file("list.pt")); }).find("not a state_dict"),
            std::string::npos);
}

TEST_F(StateDictTest, StorageMissingFromTheZipIsRefused) {
  auto t = float_tensor("7", 4, 0, {4}, {1});
  write_zip(file("missing.pt"), detail::pickle_state_dict({t}),
            {{"data/0", std::string(16, '\0')}});
  EXPECT_NE(error_of([&] {
              read_torch_state_dict(file("missing.pt"));
            }).find("names storage '7', which the zip lacks"),
            std::string::npos);
}

TEST_F(StateDictTest, TensorsPastTheirStorageAreRefused) {
  const std::vector<std::pair<std::string, std::string>> four_floats = {
      {"data/0", std::string(16, '\0')}};
  write_zip(file("offset.pt"), detail::pickle_state_dict({float_tensor("0", 4, 4, {1}, {1})}),
            four_floats);
  EXPECT_NE(
      error_of([&] { read_torch_state_dict(file("offset.pt")); }).find("reaches past its storage"),
      std::string::npos);
  write_zip(file("stride.pt"),
            detail::pickle_state_dict({float_tensor("0", 4, 0, {2, 2}, {INT64_MAX, 1})}),
            four_floats);
  EXPECT_NE(
      error_of([&] { read_torch_state_dict(file("stride.pt")); }).find("reaches past its storage"),
      std::string::npos);
  // The pickle claims 2^40 elements of a 16-byte record: refused before any allocation.
  write_zip(file("numel.pt"),
            detail::pickle_state_dict({float_tensor("0", int64_t{1} << 40, 0, {4}, {1})}),
            four_floats);
  EXPECT_NE(error_of([&] { read_torch_state_dict(file("numel.pt")); }).find("holds 16 bytes"),
            std::string::npos);
}

TEST_F(StateDictTest, ZipDirectoryClaimingMoreThanTheFileIsRefused) {
  write_torch_state_dict(file("ok.pt"), {{"w", ::torch::ones({4})}});
  std::string bytes = slurp(file("ok.pt"));
  // The central directory entry of archive/data/0: sizes at +20 and +24.
  size_t entry = bytes.find(std::string("PK\x01\x02", 4));
  while (entry != std::string::npos && bytes.compare(entry + 46, 14, "archive/data/0") != 0)
    entry = bytes.find(std::string("PK\x01\x02", 4), entry + 1);
  ASSERT_NE(entry, std::string::npos);
  for (size_t at : {entry + 20, entry + 24}) bytes.replace(at, 4, "\xff\xff\xff\x7f");
  spit(file("huge.pt"), bytes);
  EXPECT_NE(
      error_of([&] { read_torch_state_dict(file("huge.pt")); }).find("claims 2147483647 bytes"),
      std::string::npos);
}

TEST_F(StateDictTest, TruncationAtEveryByteIsRefused) {
  write_torch_state_dict(file("small.pt"), {{"a", ::torch::arange(3, ::torch::kFloat)},
                                            {"b", ::torch::ones({2}, ::torch::kLong)}});
  const std::string bytes = slurp(file("small.pt"));
  for (size_t n = 0; n < bytes.size(); ++n) {
    spit(file("cut.pt"), bytes.substr(0, n));
    EXPECT_NE(error_of([&] { read_torch_state_dict(file("cut.pt")); }), "") << "cut at " << n;
  }
  // And the pickle alone cut at every byte, inside a whole zip.
  const std::string pickle = detail::pickle_state_dict({float_tensor("0", 4, 0, {4}, {1})});
  for (size_t n = 0; n < pickle.size(); ++n) {
    write_zip(file("cutpkl.pt"), pickle.substr(0, n), {{"data/0", std::string(16, '\0')}});
    EXPECT_NE(error_of([&] { read_torch_state_dict(file("cutpkl.pt")); }), "")
        << "pickle cut at " << n;
  }
}

examples::FashionCnn seeded_cnn(uint64_t seed) {
  ::torch::manual_seed(seed);
  examples::FashionCnn model;
  for (auto& [name, buffer] : state_dict(*model)) {
    ::torch::NoGradGuard no_grad;
    if (name.find("running_mean") != std::string::npos) buffer.uniform_(-0.5, 0.5);
    if (name.find("running_var") != std::string::npos) buffer.uniform_(0.5, 2.0);
  }
  model->eval();
  return model;
}

TEST_F(StateDictTest, LoadStateDictCopiesEveryTensorAndChecksFirst) {
  auto source = seeded_cnn(1), target = seeded_cnn(2);
  save_state_dict(file("cnn.pt"), *source);
  load_state_dict(file("cnn.pt"), *target);
  auto input = ::torch::randn({3, 1, 28, 28});
  EXPECT_TRUE(::torch::equal(source->forward(input), target->forward(input)));
  for (const auto& p : target->parameters()) EXPECT_TRUE(p.requires_grad());  // still trainable

  examples::FashionCnnOptions narrow;
  narrow.channels1 = 8;
  examples::FashionCnn narrower(narrow);
  auto before = state_dict(*narrower)[0].second.clone();
  std::string message = error_of([&] { load_state_dict(file("cnn.pt"), *narrower); });
  EXPECT_NE(message.find("does not match the model"), std::string::npos) << message;
  EXPECT_TRUE(::torch::equal(state_dict(*narrower)[0].second, before));  // unchanged

  NamedTensors doubles = state_dict(*source);
  for (auto& [name, t] : doubles) t = t.to(::torch::kDouble);
  write_weights(file("doubles.pt"), doubles);
  EXPECT_NE(error_of([&] { load_state_dict(file("doubles.pt"), *target); }), "");
}

TEST_F(StateDictTest, EveryFormatLoadsTheSameWeights) {
  auto source = seeded_cnn(4);
  ::torch::optim::SGD sgd(source->parameters(), 0.1);
  save_checkpoint(file("checkpoint.pt"), *source, sgd, {});
  save_state_dict(file("weights.safetensors"), *source);
  save_state_dict(file("weights.pth"), *source);
  EXPECT_EQ(detect_weights_format(file("checkpoint.pt")), WeightsFormat::kLockstepCheckpoint);
  EXPECT_EQ(detect_weights_format(file("weights.safetensors")), WeightsFormat::kSafetensors);
  EXPECT_EQ(detect_weights_format(file("weights.pth")), WeightsFormat::kTorchSave);
  auto input = ::torch::randn({2, 1, 28, 28});
  for (const char* name : {"checkpoint.pt", "weights.safetensors", "weights.pth"}) {
    auto target = seeded_cnn(5);
    load_state_dict(file(name), *target);
    EXPECT_TRUE(::torch::equal(source->forward(input), target->forward(input))) << name;
  }
  // torch.save's legacy (pre-1.6) format begins with the pickle of its magic number.
  spit(file("legacy.pt"), ops("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."));
  EXPECT_NE(error_of([&] { read_weights(file("legacy.pt")); }).find("legacy torch.save file"),
            std::string::npos);
  spit(file("garbage.bin"), "not weights at all");
  EXPECT_NE(error_of([&] { read_weights(file("garbage.bin")); }).find("is neither"),
            std::string::npos);
}

// ---- Python (docs/interop.md, "Python round trips") ----

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

void python(const std::string& args) {
  const std::string command = fmt::format("/usr/bin/python3 {} {}", LOCKSTEP_STATE_DICT_PY, args);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

::torch::Tensor logits_in(const std::string& path) {
  NamedTensors read = read_torch_state_dict(path);  // a plain dict, as Python saves it
  EXPECT_EQ(read.size(), 1u);
  return read.at(0).second;
}

class PythonStateDictTest : public StateDictTest {
 protected:
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
    ::torch::set_num_threads(1);
    ::torch::manual_seed(11);
    input = ::torch::randn({4, 1, 28, 28});
    write_torch_state_dict(file("input.pt"), {{"input", input}});
  }
  ::torch::Tensor input;
};

TEST_F(PythonStateDictTest, PythonComputesTheLogitsOfWeightsLockstepWrote) {
  auto model = seeded_cnn(21);
  save_state_dict(file("cpp.pt"), *model);
  python(fmt::format("forward {} {} {}", file("cpp.pt"), file("input.pt"), file("py_logits.pt")));
  ::torch::NoGradGuard no_grad;
  auto expected = model->forward(input);
  EXPECT_LE((logits_in(file("py_logits.pt")) - expected).abs().max().item<double>(), 1e-6);
}

TEST_F(PythonStateDictTest, LockstepComputesTheLogitsOfATorchSaveFile) {
  python(fmt::format("make 22 {} {} {}", file("input.pt"), file("py.pt"), file("py_logits.pt")));
  auto model = seeded_cnn(23);
  load_state_dict(file("py.pt"), *model);
  ::torch::NoGradGuard no_grad;
  EXPECT_LE((logits_in(file("py_logits.pt")) - model->forward(input)).abs().max().item<double>(),
            1e-6);
  for (const auto& [name, t] : state_dict(*model)) {
    if (name.find("num_batches_tracked") == std::string::npos) continue;
    EXPECT_EQ(t.item<int64_t>(), 7) << name;
  }
}

TEST_F(PythonStateDictTest, EveryDtypeSurvivesPythonsLoadAndSave) {
  const NamedTensors written = one_of_every_dtype();
  write_torch_state_dict(file("dtypes.pt"), written);
  python(fmt::format("resave {} {}", file("dtypes.pt"), file("resaved.pt")));
  expect_bit_exact(read_torch_state_dict(file("resaved.pt")), written);
}

TEST_F(PythonStateDictTest, PythonViewsOfOneStorageReadAsViews) {
  python(fmt::format("views {}", file("views.pt")));
  NamedTensors read = read_torch_state_dict(file("views.pt"));
  ASSERT_EQ(read.size(), 4u);
  auto base = ::torch::arange(12, ::torch::kFloat);
  EXPECT_TRUE(::torch::equal(read[0].second, base));
  EXPECT_TRUE(::torch::equal(read[1].second, base.slice(0, 2, 6).view({2, 2})));
  EXPECT_TRUE(::torch::equal(read[2].second, base.view({3, 4}).t()));
  EXPECT_TRUE(::torch::equal(read[3].second, ::torch::arange(4, ::torch::kBFloat16)));
  EXPECT_EQ(read[1].second.data_ptr<float>(), read[0].second.data_ptr<float>() + 2);  // shared
}

}  // namespace
}  // namespace lockstep::torch
