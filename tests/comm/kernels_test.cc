// The vector kernels against the scalar reference of typed_data.h, and the
// scalar and AVX2 families against each other, bitwise.
#include <gtest/gtest.h>

#include <vector>

#include "comm/kernels/reduce.h"
#include "support/typed_data.h"

namespace lockstep::testing {
namespace {

namespace k = comm::kernels;

std::vector<uint8_t> run_kernel(DataType dt, ReduceOp op, size_t count, int n, int salt) {
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<const void*> ptrs;
  for (int r = 0; r < n; ++r) inputs.push_back(make_input(dt, op, count, r, salt));
  for (auto& in : inputs) ptrs.push_back(in.data());
  std::vector<uint8_t> out(count * comm::dtype_size(dt));
  k::reduce(dt, op, ptrs.data(), n, out.data(), count, n);
  return out;
}

class KernelFamilies : public ::testing::TestWithParam<k::Family> {
 protected:
  void SetUp() override {
    if (GetParam() == k::Family::kAvx2 && !k::cpu_has_avx2_f16c())
      GTEST_SKIP() << "CPU lacks AVX2/F16C";
    saved_ = k::active_family();
    k::set_family(GetParam());
  }
  void TearDown() override { k::set_family(saved_); }
  k::Family saved_ = k::Family::kScalar;
};

TEST_P(KernelFamilies, MatchReferenceForEveryDtypeOpAndArity) {
  int salt = 0;
  for (int dti = 0; dti < comm::kNumDataTypes; ++dti)
    for (int opi = 0; opi < comm::kNumReduceOps; ++opi)
      for (int n : {1, 2, 3, 8})
        for (size_t count : {size_t{1}, size_t{5}, size_t{513}, size_t{4099}}) {
          auto dt = static_cast<DataType>(dti);
          auto op = static_cast<ReduceOp>(opi);
          ++salt;
          auto got = run_kernel(dt, op, count, n, salt);
          auto want = reference_reduce(dt, op, 0, count, count, n, salt);
          long i = first_difference(got, want, comm::dtype_size(dt));
          ASSERT_EQ(i, -1) << comm::dtype_name(dt) << " " << comm::reduce_op_name(op) << " n=" << n
                           << " count=" << count;
        }
}

// The two-input pass and the blocked loop both write out[i] only after
// reading every input's element i (Note [Two-input reduction]).
TEST_P(KernelFamilies, OutputMayAliasAnInput) {
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32})
    for (int opi = 0; opi < comm::kNumReduceOps; ++opi)
      for (int n : {2, 3})
        for (int alias : {0, n - 1}) {
          const auto op = static_cast<ReduceOp>(opi);
          const size_t count = 1000;
          std::vector<std::vector<uint8_t>> inputs;
          std::vector<const void*> ptrs;
          for (int r = 0; r < n; ++r) inputs.push_back(make_input(dt, op, count, r, 1));
          for (auto& in : inputs) ptrs.push_back(in.data());
          k::reduce(dt, op, ptrs.data(), n, inputs[alias].data(), count, n);
          EXPECT_EQ(first_difference(inputs[alias], reference_reduce(dt, op, 0, count, count, n, 1),
                                     comm::dtype_size(dt)),
                    -1)
              << comm::dtype_name(dt) << " " << comm::reduce_op_name(op) << " n=" << n << " out=in["
              << alias << "]";
        }
}

INSTANTIATE_TEST_SUITE_P(Families, KernelFamilies,
                         ::testing::Values(k::Family::kScalar, k::Family::kAvx2),
                         [](const auto& info) {
                           return info.param == k::Family::kAvx2 ? "avx2" : "scalar";
                         });

}  // namespace
}  // namespace lockstep::testing
