#include "support/collective_matrix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/typed_data.h"
#include "lockstep/comm/half.h"

namespace lockstep::testing::matrix {
namespace {

bool g_bitwise = false;
size_t g_max_count = SIZE_MAX;

using comm::Communicator;

constexpr std::array kDTypes = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                DataType::kFloat64, DataType::kInt8,     DataType::kUInt8,
                                DataType::kInt32,   DataType::kInt64,    DataType::kInt16};
std::vector<DataType> g_skipped;

// kDTypes less those a transport lacks (skip_dtype).
std::vector<DataType> dtypes() {
  std::vector<DataType> out;
  for (DataType dt : kDTypes)
    if (std::find(g_skipped.begin(), g_skipped.end(), dt) == g_skipped.end()) out.push_back(dt);
  return out;
}

constexpr std::array kOps = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};
constexpr std::array<size_t, 5> kCounts = {0, 1, 7, 1000, 1'000'003};

// Sanitizer builds (GCC's __SANITIZE_*__, clang's __has_feature) run the
// matrix 5 to 10 times slower, and the largest count is most of it. What a
// sanitizer checks there is the chunked, pipelined paths' offsets, which
// depend on the element size and count, not on the op (the op's kernel is
// the same function over a smaller range, and every op runs at counts up to
// 1000 for every dtype). So above 1000 elements a sanitizer build reduces
// each dtype with one op, rotating so that every op still takes the large
// path: 9 large cases per collective instead of 45. Other builds run all,
// unless a caller asks for the same thinning (thin_large_counts).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
constexpr bool kSanitized = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
constexpr bool kSanitized = false;
#endif

bool g_thin_large = kSanitized;

bool skip_large_case(DataType dtype, ReduceOp op, size_t count) {
  if (!g_thin_large || count <= 1000) return false;
  size_t d = std::find(kDTypes.begin(), kDTypes.end(), dtype) - kDTypes.begin();
  return kOps[d % kOps.size()] != op;
}

void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DataType dtype,
                 const std::string& what) {
  size_t es = comm::dtype_size(dtype);
  ASSERT_EQ(got.size(), want.size()) << what;
  long i = first_difference(got, want, es);
  EXPECT_EQ(i, -1) << what << ": element " << i << " is "
                   << (i >= 0 ? describe_element(dtype, got.data() + i * es) : "") << ", reference "
                   << (i >= 0 ? describe_element(dtype, want.data() + i * es) : "");
}

double as_double(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return comm::f16_to_float(v);
    }
    case DataType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return comm::bf16_to_float(v);
    }
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

// Relative tolerance per element: a few roundings of the storage type, since
// the transport may pair contributions differently (and round 16-bit floats
// after every pairwise combine).
double tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 4e-3;
    case DataType::kBFloat16: return 3e-2;
    case DataType::kFloat32: return 1e-5;
    default: return 1e-12;
  }
}

void expect_reduced(ReduceOp op, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                    DataType dtype, const std::string& what) {
  bool exact =
      g_bitwise || !comm::is_floating(dtype) || op == ReduceOp::kMin || op == ReduceOp::kMax;
  if (exact) return expect_same(got, want, dtype, what);
  size_t es = comm::dtype_size(dtype);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size() / es; ++i) {
    double g = as_double(dtype, got.data() + i * es), w = as_double(dtype, want.data() + i * es);
    if (std::fabs(g - w) > tolerance(dtype) * std::max(1.0, std::fabs(w))) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", reference " << w;
      return;
    }
  }
}

std::string label(const char* op, DataType dtype, size_t count) {
  return fmt::format("{} {} count={}", op, comm::dtype_name(dtype), count);
}

std::vector<uint8_t> concat_inputs(DataType dtype, const std::vector<size_t>& counts, int salt) {
  std::vector<uint8_t> all;
  for (size_t r = 0; r < counts.size(); ++r) {
    auto part = make_input(dtype, ReduceOp::kSum, counts[r], static_cast<int>(r), salt);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace

void skip_dtype(DataType dtype) { g_skipped.push_back(dtype); }

// Bodies as in tests/comm/collectives_test.cc.
void allreduce_every_dtype_op_and_count(Communicator& c) {
  int salt = 0;
  for (DataType dt : dtypes())
    for (ReduceOp op : kOps)
      for (size_t count : kCounts) {
        if (count > g_max_count || skip_large_case(dt, op, count)) continue;
        ++salt;
        auto in = make_input(dt, op, count, c.rank(), salt);
        auto want = reference_reduce(dt, op, 0, count, count, c.size(), salt);
        auto what = label("allreduce", dt, count) + " op=" + std::string(comm::reduce_op_name(op));
        if (salt % 2) {  // in place
          c.allreduce(in.data(), count, dt, op);
          expect_reduced(op, in, want, dt, what + " in-place");
        } else {
          std::vector<uint8_t> out(in.size());
          c.allreduce(in.data(), out.data(), count, dt, op);
          expect_reduced(op, out, want, dt, what);
        }
      }
}

void reduce_to_every_root(Communicator& c) {
  int salt = 1000;
  for (int root = 0; root < c.size(); ++root)
    for (DataType dt : dtypes())
      for (ReduceOp op : kOps)
        for (size_t count : kCounts) {
          if (count > g_max_count) continue;
          if (count > 1000 && op != ReduceOp::kSum && root != 0) continue;  // bound run time
          if (skip_large_case(dt, op, count)) continue;
          ++salt;
          auto in = make_input(dt, op, count, c.rank(), salt);
          std::vector<uint8_t> out(in.size(), 0xAB);
          c.reduce(in.data(), c.rank() == root ? out.data() : nullptr, count, dt, op, root);
          if (c.rank() == root)
            expect_reduced(op, out, reference_reduce(dt, op, 0, count, count, c.size(), salt), dt,
                           label("reduce", dt, count) + fmt::format(" root={}", root));
        }
}

void broadcast_from_every_root(Communicator& c) {
  int salt = 2000;
  for (int root = 0; root < c.size(); ++root)
    for (DataType dt : dtypes())
      for (size_t count : kCounts) {
        if (count > g_max_count) continue;
        ++salt;
        auto want = make_input(dt, ReduceOp::kSum, count, root, salt);
        auto buf = c.rank() == root ? want : std::vector<uint8_t>(want.size(), 0x5A);
        c.broadcast(buf.data(), count, dt, root);
        expect_same(buf, want, dt, label("broadcast", dt, count) + fmt::format(" root={}", root));
      }
}

void allgather_and_allgatherv(Communicator& c) {
  int salt = 3000;
  for (DataType dt : dtypes())
    for (size_t count : kCounts) {
      if (count > g_max_count) continue;
      ++salt;
      std::vector<size_t> equal(c.size(), count);
      auto mine = make_input(dt, ReduceOp::kSum, count, c.rank(), salt);
      std::vector<uint8_t> out(mine.size() * c.size());
      c.allgather(mine.data(), out.data(), count, dt);
      expect_same(out, concat_inputs(dt, equal, salt), dt, label("allgather", dt, count));
      // Uneven: rank r contributes (count + r * 3) % (count + 1), zero included.
      std::vector<size_t> uneven(c.size());
      for (int r = 0; r < c.size(); ++r) uneven[r] = (count + r * 3) % (count + 1);
      auto part = make_input(dt, ReduceOp::kSum, uneven[c.rank()], c.rank(), salt);
      std::vector<uint8_t> outv(std::accumulate(uneven.begin(), uneven.end(), size_t{0}) *
                                comm::dtype_size(dt));
      c.allgatherv(part.data(), outv.data(), uneven, dt);
      expect_same(outv, concat_inputs(dt, uneven, salt), dt, label("allgatherv", dt, count));
    }
}

void gather_and_scatter_every_root(Communicator& c) {
  int salt = 4000;
  for (int root = 0; root < c.size(); ++root)
    for (DataType dt : dtypes())
      for (size_t count : kCounts) {
        if (count > g_max_count) continue;
        if (count > 1000 && root != c.size() - 1) continue;  // one large case per size
        ++salt;
        std::vector<size_t> equal(c.size(), count);
        auto all = concat_inputs(dt, equal, salt);
        auto mine = make_input(dt, ReduceOp::kSum, count, c.rank(), salt);
        std::vector<uint8_t> gathered(all.size(), 0x11);
        c.gather(mine.data(), c.rank() == root ? gathered.data() : nullptr, count, dt, root);
        if (c.rank() == root)
          expect_same(gathered, all, dt,
                      label("gather", dt, count) + fmt::format(" root={}", root));
        std::vector<uint8_t> piece(mine.size(), 0x22);
        c.scatter(c.rank() == root ? all.data() : nullptr, piece.data(), count, dt, root);
        expect_same(piece, mine, dt, label("scatter", dt, count) + fmt::format(" root={}", root));
      }
}

void reduce_scatter_every_dtype_and_op(Communicator& c) {
  int salt = 5000;
  for (DataType dt : dtypes())
    for (ReduceOp op : kOps)
      for (size_t count : kCounts) {
        if (count > g_max_count || skip_large_case(dt, op, count)) continue;
        ++salt;
        size_t block = count > 1000 ? count / c.size() + 1 : count;
        size_t full = block * c.size();
        auto in = make_input(dt, op, full, c.rank(), salt);
        std::vector<uint8_t> out(block * comm::dtype_size(dt));
        c.reduce_scatter(in.data(), out.data(), block, dt, op);
        expect_reduced(
            op, out, reference_reduce(dt, op, block * c.rank(), block, full, c.size(), salt), dt,
            label("reduce_scatter", dt, block) + " op=" + std::string(comm::reduce_op_name(op)));
      }
}

void alltoall_and_alltoallv(Communicator& c) {
  int salt = 6000;
  int n = c.size();
  for (DataType dt : dtypes())
    for (size_t count : kCounts) {
      if (count > g_max_count) continue;
      ++salt;
      size_t es = comm::dtype_size(dt);
      size_t per = count > 1000 ? count / n : count;
      // Rank r's block for rank j is elements of make_input(r) at [j*per, (j+1)*per).
      auto mine = make_input(dt, ReduceOp::kSum, per * n, c.rank(), salt);
      std::vector<uint8_t> out(per * n * es);
      c.alltoall(mine.data(), out.data(), per, dt);
      std::vector<uint8_t> want;
      for (int r = 0; r < n; ++r) {
        auto theirs = make_input(dt, ReduceOp::kSum, per * n, r, salt);
        want.insert(want.end(), theirs.begin() + c.rank() * per * es,
                    theirs.begin() + (c.rank() + 1) * per * es);
      }
      expect_same(out, want, dt, label("alltoall", dt, per));
      // alltoallv: rank i sends (i + 2j + count) % 5 * (per + 1) elements to rank j.
      auto amount = [&](int i, int j) { return ((i + 2 * j + count) % 5) * (per / 4 + 1); };
      std::vector<size_t> sc(n), rc(n);
      for (int j = 0; j < n; ++j) {
        sc[j] = amount(c.rank(), j);
        rc[j] = amount(j, c.rank());
      }
      size_t total_send = std::accumulate(sc.begin(), sc.end(), size_t{0});
      auto src = make_input(dt, ReduceOp::kSum, total_send, c.rank(), salt + 7);
      std::vector<uint8_t> dst(std::accumulate(rc.begin(), rc.end(), size_t{0}) * es);
      c.alltoallv(src.data(), sc, dst.data(), rc, dt);
      std::vector<uint8_t> wantv;
      for (int i = 0; i < n; ++i) {
        size_t before = 0, total = 0;
        for (int j = 0; j < n; ++j) {
          if (j < c.rank()) before += amount(i, j);
          total += amount(i, j);
        }
        auto theirs = make_input(dt, ReduceOp::kSum, total, i, salt + 7);
        wantv.insert(wantv.end(), theirs.begin() + before * es,
                     theirs.begin() + (before + amount(i, c.rank())) * es);
      }
      expect_same(dst, wantv, dt, label("alltoallv", dt, per));
    }
}

void send_recv_ring_and_barrier(Communicator& c) {
  int n = c.size();
  if (n == 1) {
    c.barrier();
    return;
  }
  int salt = 7000;
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{300'001}}) {
    ++salt;
    int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    auto mine = make_input(DataType::kFloat32, ReduceOp::kSum, count, c.rank(), salt);
    std::vector<uint8_t> got(mine.size());
    // Even ranks send first so the ring cannot deadlock on bounded mailboxes.
    if (c.rank() % 2 == 0) {
      c.send(mine.data(), count, DataType::kFloat32, next, salt);
      c.recv(got.data(), count, DataType::kFloat32, prev, salt);
    } else {
      c.recv(got.data(), count, DataType::kFloat32, prev, salt);
      c.send(mine.data(), count, DataType::kFloat32, next, salt);
    }
    expect_same(got, make_input(DataType::kFloat32, ReduceOp::kSum, count, prev, salt),
                DataType::kFloat32, fmt::format("send/recv count={}", count));
    c.barrier();
  }
}

void require_bitwise_reductions(bool on) { g_bitwise = on; }
void limit_counts(size_t max_count) { g_max_count = max_count; }
void thin_large_counts() { g_thin_large = true; }

void run_all(Communicator& c) {
  allreduce_every_dtype_op_and_count(c);
  reduce_to_every_root(c);
  broadcast_from_every_root(c);
  allgather_and_allgatherv(c);
  gather_and_scatter_every_root(c);
  reduce_scatter_every_dtype_and_op(c);
  alltoall_and_alltoallv(c);
  send_recv_ring_and_barrier(c);
}

}  // namespace lockstep::testing::matrix
