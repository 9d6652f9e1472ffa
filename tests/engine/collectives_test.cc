// Results of each collective across real processes, fused and unfused.
#include <algorithm>
#include <atomic>
#include <random>

#include "engine/engine_harness.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/half.h"

namespace lockstep::testing {
namespace {

float value_of(int rank, int tensor, int i) {
  return static_cast<float>(rank + 1) * 0.25f + static_cast<float>(tensor) +
         0.001f * static_cast<float>(i);
}

// Reference sum in rank order, as the shm transport reduces.
float rank_order_sum(int size, int tensor, int i, float prescale) {
  float acc = value_of(0, tensor, i) * prescale;
  for (int r = 1; r < size; ++r) acc += value_of(r, tensor, i) * prescale;
  return acc;
}

TEST(EngineCollectives, SingleProcessAllreduce) {
  auto world = local_world(0, 1, unique_job_id());
  Engine engine(comm::Communicator::create(world, "shm"));
  std::vector<float> in = {1, 2, 3}, out(3);
  engine.allreduce_async("x", in.data(), out.data(), {3}, DataType::kFloat32, ReduceOp::kAverage)
      .wait();
  EXPECT_EQ(out, in);
  EXPECT_EQ(engine.size(), 1);
  engine.barrier();
}

TEST(EngineCollectives, ProcessWideEngine) {
  auto results = run_workers_raw(2, [](const comm::WorldInfo& world) {
    EXPECT_FALSE(engine::is_initialized());
    EXPECT_THROW(engine::rank(), InvalidArgument);
    engine::init(world);
    EXPECT_THROW(engine::init(world), InvalidArgument);
    EXPECT_EQ(engine::rank(), world.rank);
    EXPECT_EQ(engine::size(), 2);
    EXPECT_EQ(engine::local_size(), 2);
    std::vector<float> x = {1.0f};
    engine::global().allreduce_async("g", x.data(), x.data(), {1}, DataType::kFloat32).wait();
    EXPECT_EQ(x[0], 2.0f);
    engine::shutdown();
    EXPECT_FALSE(engine::is_initialized());
  });
  expect_all_ok(results);
}

TEST(EngineCollectives, DifferentEnqueueOrdersAgree) {
  constexpr int kTensors = 40;
  auto results = run_engines(3, [](Engine& e) {
    std::vector<int> order(kTensors);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(1234 + e.rank()));
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<engine::Handle> handles(kTensors);
      for (int t : order) {
        in[t].resize(t + 1);
        for (int i = 0; i <= t; ++i) in[t][i] = value_of(e.rank(), t, i);
        out[t].resize(t + 1);
        handles[t] = e.allreduce_async("t" + std::to_string(t), in[t].data(), out[t].data(),
                                       {t + 1}, DataType::kFloat32);
      }
      for (int t = 0; t < kTensors; ++t) {
        handles[t].wait();
        for (int i = 0; i <= t; ++i) ASSERT_EQ(out[t][i], rank_order_sum(3, t, i, 1.0f));
      }
    }
  });
  expect_all_ok(results);
}

TEST(EngineCollectives, ManySmallTensorsOverManySteps) {
  auto results = run_engines(2, [](Engine& e) {
    std::mt19937 sizes(7);  // same sizes on every rank
    std::vector<int> len(500);
    for (auto& l : len) l = 1 + static_cast<int>(sizes() % 100);
    for (int step = 0; step < 4; ++step) {
      std::vector<std::vector<int32_t>> data(500);
      std::vector<engine::Handle> handles;
      for (int t = 0; t < 500; ++t) {
        data[t].assign(len[t], (e.rank() + 1) * (t + step));
        handles.push_back(e.allreduce_async("g" + std::to_string(t), data[t].data(), data[t].data(),
                                            {len[t]}, DataType::kInt32));
      }
      for (int t = 0; t < 500; ++t) {
        handles[t].wait();
        ASSERT_EQ(data[t].front(), 3 * (t + step));
        ASSERT_EQ(data[t].back(), 3 * (t + step));
      }
    }
  });
  expect_all_ok(results);
}

// A cache far smaller than the working set: slots are evicted while ranks
// have them pending, and those names must be re-announced, not lost.
TEST(EngineCollectives, TinyResponseCacheStillCompletesEverything) {
  MultiProcOptions options;
  options.env["LOCKSTEP_CACHE_CAPACITY"] = "4";
  auto results = run_engines(
      3,
      [](Engine& e) {
        std::vector<int> order(30);
        std::iota(order.begin(), order.end(), 0);
        for (int step = 0; step < 4; ++step) {
          std::shuffle(order.begin(), order.end(), std::mt19937(step * 10 + e.rank()));
          std::vector<std::vector<int64_t>> data(30);
          std::vector<engine::Handle> hs(30);
          for (int t : order) {
            data[t].assign(3, t + e.rank());
            hs[t] = e.allreduce_async("c" + std::to_string(t), data[t].data(), data[t].data(), {3},
                                      DataType::kInt64);
          }
          for (int t = 0; t < 30; ++t) {
            hs[t].wait();
            ASSERT_EQ(data[t][2], 3 * t + 3);
          }
        }
      },
      options);
  expect_all_ok(results);
}

TEST(EngineCollectives, MixedDtypesAndOps) {
  auto results = run_engines(3, [](Engine& e) {
    const int r = e.rank();
    std::vector<double> d = {1.0 + r, -2.0 * r};
    std::vector<int64_t> i64 = {r + 1, 10};
    std::vector<int8_t> i8 = {static_cast<int8_t>(r), static_cast<int8_t>(-r)};
    std::vector<float> f = {static_cast<float>(r) + 1, 4};
    std::vector<uint16_t> h = {comm::float_to_f16(1.0f + r), comm::float_to_f16(2)};
    std::vector<uint16_t> b = {comm::float_to_bf16(2.0f), comm::float_to_bf16(-1.0f * r)};
    std::vector<int32_t> avg = {3 * r + 1};
    std::vector<engine::Handle> hs;
    hs.push_back(
        e.allreduce_async("d", d.data(), d.data(), {2}, DataType::kFloat64, ReduceOp::kMax));
    hs.push_back(e.allreduce_async("i64", i64.data(), i64.data(), {2}, DataType::kInt64,
                                   ReduceOp::kProduct));
    hs.push_back(
        e.allreduce_async("i8", i8.data(), i8.data(), {2}, DataType::kInt8, ReduceOp::kMin));
    hs.push_back(e.allreduce_async("f", f.data(), f.data(), {2}, DataType::kFloat32,
                                   ReduceOp::kAverage, 2.0, 0.5));
    hs.push_back(e.allreduce_async("h", h.data(), h.data(), {2}, DataType::kFloat16));
    hs.push_back(
        e.allreduce_async("b", b.data(), b.data(), {2}, DataType::kBFloat16, ReduceOp::kSum, 0.5));
    hs.push_back(e.allreduce_async("avg", avg.data(), avg.data(), {1}, DataType::kInt32,
                                   ReduceOp::kAverage));
    for (auto& x : hs) x.wait();
    EXPECT_EQ(d, (std::vector<double>{3.0, 0.0}));
    EXPECT_EQ(i64, (std::vector<int64_t>{6, 1000}));
    EXPECT_EQ(i8, (std::vector<int8_t>{0, -2}));
    EXPECT_FLOAT_EQ(f[0], 2.0f);  // 0.5 * avg(2*(1,2,3))
    EXPECT_FLOAT_EQ(f[1], 4.0f);
    EXPECT_EQ(comm::f16_to_float(h[0]), 6.0f);
    EXPECT_EQ(comm::f16_to_float(h[1]), 6.0f);
    EXPECT_EQ(comm::bf16_to_float(b[0]), 3.0f);
    EXPECT_EQ(comm::bf16_to_float(b[1]), -1.5f);
    EXPECT_EQ(avg[0], (1 + 4 + 7) / 3);
  });
  expect_all_ok(results);
}

// Deterministic mode: the fused result is bitwise the unfused one and the
// rank-order reference, whatever the threshold.
TEST(EngineCollectives, FusedEqualsUnfusedBitwise) {
  MultiProcOptions options;
  options.env["LOCKSTEP_DETERMINISTIC"] = "1";
  auto results = run_workers_raw(
      3,
      [](const comm::WorldInfo& world) {
        std::vector<std::vector<float>> outputs;
        for (size_t threshold : {size_t{0}, size_t{4096}, size_t{64} << 20}) {
          comm::WorldInfo w = world;
          w.job_id += "f" + std::to_string(threshold);
          EngineConfig config = EngineConfig::from_knobs();
          config.fusion_threshold = threshold;
          Engine e(comm::Communicator::create(w, "shm"), config);
          std::vector<std::vector<float>> in(60), out(60);
          std::vector<engine::Handle> hs;
          for (int t = 0; t < 60; ++t) {
            for (int i = 0; i < 37 + t; ++i) in[t].push_back(value_of(e.rank(), t, i) * 1.37f);
            out[t].resize(in[t].size());
            hs.push_back(e.allreduce_async("p" + std::to_string(t), in[t].data(), out[t].data(),
                                           {37 + t}, DataType::kFloat32, ReduceOp::kAverage, 0.3,
                                           1.7));
          }
          std::vector<float> flat;
          for (int t = 0; t < 60; ++t) {
            hs[t].wait();
            flat.insert(flat.end(), out[t].begin(), out[t].end());
            for (int i = 0; i < 37 + t; ++i) {
              float ref = 0;
              for (int r = 0; r < 3; ++r) {
                float x = value_of(r, t, i) * 1.37f * 0.3f;
                ref = r == 0 ? x : ref + x;
              }
              ref *= static_cast<float>(1.7 / 3);
              ASSERT_EQ(std::memcmp(&ref, &out[t][i], 4), 0) << "tensor " << t << " element " << i;
            }
          }
          outputs.push_back(flat);
          e.shutdown();
        }
        EXPECT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), outputs[0].size() * 4), 0);
        EXPECT_EQ(std::memcmp(outputs[0].data(), outputs[2].data(), outputs[0].size() * 4), 0);
      },
      options);
  expect_all_ok(results);
}

TEST(EngineCollectives, AllgatherBroadcastAlltoallReduceScatter) {
  auto results = run_engines(3, [](Engine& e) {
    const int r = e.rank();
    // allgather: rank r contributes r+1 rows of 2.
    std::vector<int32_t> rows(2 * (r + 1), r), gathered;
    auto g = e.allgather_async("ag", rows.data(), {r + 1, 2}, DataType::kInt32,
                               vector_allocator(gathered));
    // broadcast from rank 1.
    std::vector<double> w = {r * 1.0, r * 2.0};
    auto b = e.broadcast_async("bc", w.data(), {2}, DataType::kFloat64, 1);
    // alltoall: rank r sends (d+1) rows to rank d, each row = 10*r + d.
    std::vector<float> send;
    std::vector<int64_t> splits;
    for (int d = 0; d < 3; ++d) {
      splits.push_back(d + 1);
      for (int k = 0; k <= d; ++k) send.push_back(10.0f * r + d);
    }
    std::vector<float> received;
    auto a = e.alltoall_async("a2a", send.data(), {6}, DataType::kFloat32, splits,
                              vector_allocator(received));
    // reduce_scatter of 7 rows (uneven: 3,2,2) and of 6 rows (even).
    std::vector<int64_t> rs7(7), rs6(6), out7, out6;
    std::iota(rs7.begin(), rs7.end(), 0);
    std::iota(rs6.begin(), rs6.end(), 100);
    auto s7 = e.reduce_scatter_async("rs7", rs7.data(), {7}, DataType::kInt64, ReduceOp::kSum,
                                     vector_allocator(out7));
    auto s6 = e.reduce_scatter_async("rs6", rs6.data(), {6}, DataType::kInt64, ReduceOp::kMax,
                                     vector_allocator(out6));
    g.wait();
    b.wait();
    a.wait();
    s7.wait();
    s6.wait();
    EXPECT_EQ(g.output_shape(), (Shape{6, 2}));
    EXPECT_EQ(gathered, (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
    EXPECT_EQ(w, (std::vector<double>{1.0, 2.0}));
    EXPECT_EQ(a.received_splits(), (std::vector<int64_t>{r + 1, r + 1, r + 1}));
    ASSERT_EQ(received.size(), static_cast<size_t>(3 * (r + 1)));
    for (int s = 0; s < 3; ++s) EXPECT_EQ(received[s * (r + 1)], 10.0f * s + r);
    std::vector<std::vector<int64_t>> want7 = {{0, 3, 6}, {9, 12}, {15, 18}};
    EXPECT_EQ(out7, want7[r]);
    EXPECT_EQ(out6, (std::vector<int64_t>{100 + 2 * r, 101 + 2 * r}));
  });
  expect_all_ok(results);
}

TEST(EngineCollectives, GroupedAllreduceCallbacksAndBarrier) {
  auto results = run_engines(2, [](Engine& e) {
    std::vector<float> a = {1, 2}, b = {3};
    std::atomic<int> called{0};
    engine::OpOptions options;
    options.on_done = [&](std::exception_ptr error) {
      EXPECT_EQ(error, nullptr);
      called.fetch_add(1);
    };
    auto h = e.grouped_allreduce_async({"ga", "gb"}, {a.data(), b.data()}, {a.data(), b.data()},
                                       {{2}, {1}}, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0,
                                       options);
    h.wait();
    EXPECT_EQ(a, (std::vector<float>{2, 4}));
    EXPECT_EQ(b, (std::vector<float>{6}));
    e.barrier();
    EXPECT_EQ(called.load(), 1);
    EXPECT_TRUE(h.poll());
  });
  expect_all_ok(results);
}

// Horovod's grouped_allgather / grouped_reducescatter: members of different
// dtypes under one handle whose callback runs once; a group with an invalid
// member, or lists of different lengths, throw on the submitting rank.
TEST(EngineCollectives, GroupedAllgatherAndReduceScatterCompleteAsOne) {
  auto results = run_engines(3, [](Engine& e) {
    const int r = e.rank();
    std::vector<int32_t> rows(2 * (r + 1), r), gathered_rows;
    std::vector<double> one = {0.5 * r}, gathered_one;
    std::atomic<int> called{0};
    engine::OpOptions options;
    options.on_done = [&](std::exception_ptr error) {
      EXPECT_EQ(error, nullptr);
      called.fetch_add(1);
    };
    engine::Handle g = e.grouped_allgather_async(
        {"gag.rows", "gag.one"}, {rows.data(), one.data()}, {{r + 1, 2}, {1}},
        {DataType::kInt32, DataType::kFloat64},
        {vector_allocator(gathered_rows), vector_allocator(gathered_one)}, options);
    std::vector<int64_t> rs7(7), out7;
    std::vector<float> rs3(3, float(r + 1)), out3;
    std::iota(rs7.begin(), rs7.end(), 0);
    engine::Handle s =
        e.grouped_reduce_scatter_async({"grs.7", "grs.3"}, {rs7.data(), rs3.data()}, {{7}, {3}},
                                       {DataType::kInt64, DataType::kFloat32}, ReduceOp::kSum,
                                       {vector_allocator(out7), vector_allocator(out3)});
    g.wait();
    s.wait();
    EXPECT_EQ(gathered_rows, (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
    EXPECT_EQ(gathered_one, (std::vector<double>{0.0, 0.5, 1.0}));
    EXPECT_EQ(called.load(), 1);
    std::vector<std::vector<int64_t>> want7 = {{0, 3, 6}, {9, 12}, {15, 18}};
    EXPECT_EQ(out7, want7[r]);
    EXPECT_EQ(out3, (std::vector<float>{6.0f}));
    // Rank 1 alone: a negative dimension in the second member, a missing dtype.
    if (r == 1) {
      std::vector<float> x(2), y(2), got;
      expect_throw_with<InvalidArgument>(
          [&] {
            e.grouped_allgather_async({"bad.0", "bad.1"}, {x.data(), y.data()}, {{2}, {-2}},
                                      {DataType::kFloat32, DataType::kFloat32},
                                      {vector_allocator(got), vector_allocator(got)});
          },
          {"negative dimension"});
      expect_throw_with<InvalidArgument>(
          [&] {
            e.grouped_reduce_scatter_async({"bad.2"}, {x.data()}, {{2}}, {}, ReduceOp::kSum,
                                           {vector_allocator(got)});
          },
          {"1 names, 1 inputs, 1 shapes, 0 dtypes and 1 allocators"});
    }
    e.barrier();
  });
  expect_all_ok(results);
}

}  // namespace
}  // namespace lockstep::testing
