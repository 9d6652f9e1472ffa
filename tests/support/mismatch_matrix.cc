#include "support/mismatch_matrix.h"

#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::testing::matrix {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

// The user-facing names, as MismatchError spells them.
constexpr std::array<std::string_view, 9> kKinds = {"allreduce",      "reduce",   "broadcast",
                                                    "allgather",      "gather",   "scatter",
                                                    "reduce_scatter", "alltoall", "barrier"};

// One valid call of `kind` with 100 f32 per block, root 0.
void call(Communicator& c, std::string_view kind) {
  const size_t count = 100;
  size_t n = static_cast<size_t>(c.size());
  std::vector<float> in(count * n, 1.0f), out(count * n, 0.0f);
  auto f32 = DataType::kFloat32;
  if (kind == "allreduce")
    c.allreduce(in.data(), out.data(), count, f32, ReduceOp::kSum);
  else if (kind == "reduce")
    c.reduce(in.data(), out.data(), count, f32, ReduceOp::kSum, 0);
  else if (kind == "broadcast")
    c.broadcast(in.data(), count, f32, 0);
  else if (kind == "allgather")
    c.allgather(in.data(), out.data(), count, f32);
  else if (kind == "gather")
    c.gather(in.data(), out.data(), count, f32, 0);
  else if (kind == "scatter")
    c.scatter(in.data(), out.data(), count, f32, 0);
  else if (kind == "reduce_scatter")
    c.reduce_scatter(in.data(), out.data(), count, f32, ReduceOp::kSum);
  else if (kind == "alltoall")
    c.alltoall(in.data(), out.data(), count, f32);
  else
    c.barrier();
}

// How the descriptor of `kind` starts in the message ("reduce dtype", not
// a prefix of "reduce_scatter").
std::string described(std::string_view kind) {
  return kind == "barrier" ? "barrier" : fmt::format("{} dtype", kind);
}

}  // namespace

void expect_right_results(Communicator& c, const std::string& context) {
  int n = c.size();
  float one = static_cast<float>(c.rank() + 1);
  c.allreduce(&one, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(one, n * (n + 1) / 2.0f) << "small allreduce after " << context;
  // Larger than one shm slot (1 MiB): the chunked two-step algorithm.
  std::vector<int32_t> big(300'000);
  std::iota(big.begin(), big.end(), c.rank());
  c.allreduce(big.data(), big.size(), DataType::kInt32, ReduceOp::kSum);
  int32_t base = n * (n - 1) / 2;
  EXPECT_EQ(big.front(), base) << "large allreduce after " << context;
  EXPECT_EQ(big.back(), base + n * static_cast<int32_t>(big.size() - 1))
      << "large allreduce after " << context;
  int64_t value = c.rank() == n - 1 ? 42 : -1;
  c.broadcast(&value, 1, DataType::kInt64, n - 1);
  EXPECT_EQ(value, 42) << "broadcast after " << context;
  int32_t mine = 10 * c.rank();
  std::vector<int32_t> all(n, -1);
  c.allgather(&mine, all.data(), 1, DataType::kInt32);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], 10 * r) << "allgather after " << context;
}

void every_kind_pair_mismatch_then_right_results(Communicator& c) {
  ASSERT_GE(c.size(), 2);
  for (std::string_view a : kKinds) {
    for (std::string_view b : kKinds) {
      if (a == b) continue;
      std::string pair = fmt::format("rank 0 {} against {}", a, b);
      try {
        call(c, c.rank() == 0 ? a : b);
        ADD_FAILURE() << pair << ": no MismatchError";
      } catch (const MismatchError& e) {
        std::string what = e.what();
        EXPECT_NE(what.find(fmt::format("rank 0: {}", described(a))), std::string::npos)
            << pair << ": " << what;
        EXPECT_NE(what.find(fmt::format("rank 1: {}", described(b))), std::string::npos)
            << pair << ": " << what;
      }
      expect_right_results(c, pair);
      if (::testing::Test::HasFailure()) return;  // one broken pair says it all
    }
  }
}

}  // namespace lockstep::testing::matrix
