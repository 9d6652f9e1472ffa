#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/comm/half.h"
#include "lockstep/comm/types.h"

namespace lockstep::comm {
namespace {

TEST(Types, SizesAndNamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dt = static_cast<DataType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(dt)), dt);
  }
  EXPECT_EQ(dtype_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kInt64), 8u);
  EXPECT_EQ(parse_dtype("float32"), DataType::kFloat32);
  EXPECT_FALSE(parse_dtype("complex64").has_value());
  EXPECT_EQ(parse_reduce_op("avg"), ReduceOp::kAverage);
  EXPECT_THROW(dtype_size(static_cast<DataType>(42)), InvalidArgument);
}

// cpuid: clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}

__attribute__((target("f16c"))) float hw_f16_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_float_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

TEST(Half, EveryF16ValueMatchesHardware) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 65536; ++h) {
    float a = f16_to_float(static_cast<uint16_t>(h)), b = hw_f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
      continue;
    }
    EXPECT_EQ(std::memcmp(&a, &b, 4), 0) << "half bits " << h;
  }
}

TEST(Half, FloatToF16RoundsLikeHardware) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t u = bits(gen);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), hw_float_to_f16(f)) << "float bits " << std::hex << u;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Knobs, ParseBytesUnitsAndErrors) {
  EXPECT_EQ(parse_bytes("8B", "x"), 8u);
  EXPECT_EQ(parse_bytes("64KiB", "x"), 65536u);
  EXPECT_EQ(parse_bytes("256MiB", "x"), 256u << 20);
  EXPECT_EQ(parse_bytes("2g", "x"), 2ull << 30);
  EXPECT_THROW(parse_bytes("12 parsecs", "x"), InvalidArgument);
  EXPECT_THROW(parse_bytes("", "x"), InvalidArgument);
}

TEST(Knobs, UndeclaredKnobIsAnError) {
  EXPECT_THROW(knob_string("LOCKSTEP_NO_SUCH_KNOB"), InvalidArgument);
  setenv("LOCKSTEP_TIMEOUT", "abc", 1);
  EXPECT_THROW(knob_double("LOCKSTEP_TIMEOUT"), InvalidArgument);
  unsetenv("LOCKSTEP_TIMEOUT");
  EXPECT_GT(knob_double("LOCKSTEP_TIMEOUT"), 0);
}

}  // namespace
}  // namespace lockstep::comm
