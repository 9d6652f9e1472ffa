// The engine's device path (Note [Device batches] in src/engine/
// executor_device.cc) without a GPU: a stand-in device backend keeps its
// "device" buffers in host memory and counts what the executor asks of it,
// so fusion packing, the folded scale factors, the ready events, the one
// host wait per batch and the negotiated memory kind are checked in CI. The
// real NCCL backend is checked on a GPU (tests/comm/nccl_test.cc,
// tests/torch/cuda_test.cc).
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include <unistd.h>

#include <chrono>
#include <thread>

#include <gmock/gmock.h>

#include "engine/engine_harness.h"
#include "engine/executor.h"
#include "engine/trace_reader.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/device.h"

namespace lockstep::testing {
namespace {

using comm::MemoryKind;

// Host memory behind the DeviceMemory interface; the collectives are the
// wrapped shm backend's. Counts calls for the assertions below.
class HostAsDevice final : public comm::Backend, public comm::DeviceMemory {
 public:
  explicit HostAsDevice(std::unique_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}

  std::string_view name() const override { return "host-as-device"; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  MemoryKind memory() const override { return MemoryKind::kCuda; }
  comm::DeviceMemory* device_memory() override { return this; }

  void allreduce(const void* s, void* r, size_t n, DataType t, ReduceOp op) override {
    ++collectives;
    inner_->backend().allreduce(s, r, n, t, op);
  }
  void broadcast(void* b, size_t n, DataType t, int root) override {
    ++collectives;
    inner_->backend().broadcast(b, n, t, root);
  }
  void allgatherv(const void* s, void* r, std::span<const size_t> c, DataType t) override {
    ++collectives;
    inner_->backend().allgatherv(s, r, c, t);
  }
  void barrier() override { inner_->backend().barrier(); }
  void send(const void* b, size_t n, DataType t, int peer, int tag) override {
    inner_->backend().send(b, n, t, peer, tag);
  }
  void recv(void* b, size_t n, DataType t, int peer, int tag) override {
    inner_->backend().recv(b, n, t, peer, tag);
  }

  int device() const override { return 0; }
  void* stream() const override { return nullptr; }
  void* allocate(size_t bytes) override { return bytes ? std::malloc(bytes) : nullptr; }
  void free(void* p) override { std::free(p); }
  void copy(void* dst, const void* src, size_t bytes) override {
    ++copies;
    std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void wait_event(void* event) override { waited.push_back(event); }
  void record_event(void*) override {}
  void allreduce_scaled(const void* s, void* r, size_t n, DataType t, double factor) override {
    ASSERT_EQ(t, DataType::kFloat32);
    ++scaled;
    std::vector<float> scaled_in(static_cast<const float*>(s), static_cast<const float*>(s) + n);
    for (float& x : scaled_in) x = static_cast<float>(x * factor);
    allreduce(scaled_in.data(), r, n, t, ReduceOp::kSum);
  }
  void set_deferred(bool d) override { deferred_ = d; }
  bool deferred() const override { return deferred_; }
  void synchronize() override {
    ++syncs;
    // A "GPU" that takes kGpuSeconds per batch of marks, so the timeline's
    // device times fit between the batch's start and the host's wake-up.
    if (marks_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(kGpuSeconds));
  }
  // Scripted GPU times: the phases of a batch take 10, 20 and 10 ms.
  static constexpr double kGpuSeconds = 0.05;
  void mark() override { ++marks_; }
  std::vector<double> take_marks() override {
    std::vector<double> times = {0, 0.010, 0.030, 0.040};
    times.resize(static_cast<size_t>(marks_), 0.045);  // more or fewer marks: as many times
    marks_ = 0;
    return times;
  }

  int collectives = 0, copies = 0, scaled = 0, syncs = 0;
  std::vector<void*> waited;

 private:
  std::unique_ptr<comm::Communicator> inner_;
  bool deferred_ = false;
  int marks_ = 0;
};

// The engine over shm plus a HostAsDevice over a second shm job.
HostAsDevice& attach_device(Engine& e, const comm::WorldInfo& world) {
  comm::WorldInfo dev_world = world;
  dev_world.job_id += "-dev";
  auto backend = std::make_unique<HostAsDevice>(comm::Communicator::create(dev_world, "shm"));
  HostAsDevice& ref = *backend;
  e.set_device_communicator(std::make_unique<comm::Communicator>(dev_world, std::move(backend)));
  return ref;
}

engine::OpOptions on_device(std::shared_ptr<void> event = nullptr) {
  engine::OpOptions o;
  o.memory = MemoryKind::kCuda;
  o.ready_event = std::move(event);
  return o;
}

TEST(EngineDevice, FusedBatchPacksScalesOnceAndWaitsOnce) {
  auto results = run_workers_raw(2, [](const comm::WorldInfo& world) {
    Engine e(comm::Communicator::create(world, "shm"));
    HostAsDevice& dev = attach_device(e, world);
    const float r = static_cast<float>(world.rank + 1);  // rank 0: 1, rank 1: 2
    std::vector<float> a = {r, 2 * r, 3 * r}, b = {10 * r};
    auto event_a = std::make_shared<int>(1), event_b = std::make_shared<int>(2);
    std::vector<engine::Handle> hs;
    hs.push_back(e.allreduce_async("a", a.data(), a.data(), {3}, DataType::kFloat32,
                                   ReduceOp::kAverage, 1.0, 4.0, on_device(event_a)));
    hs.push_back(e.allreduce_async("b", b.data(), b.data(), {1}, DataType::kFloat32,
                                   ReduceOp::kAverage, 1.0, 4.0, on_device(event_b)));
    for (auto& h : hs) h.wait();
    // 4 x the average of 1 and 2 (times 1, 2, 3, 10): one scaled sum (x2).
    EXPECT_EQ(a, (std::vector<float>{6.0f, 12.0f, 18.0f}));
    EXPECT_EQ(b, (std::vector<float>{60.0f}));
    EXPECT_TRUE(dev.deferred());
    EXPECT_GE(dev.scaled, 1);
    EXPECT_EQ(dev.waited.size(), 2u);  // each input's ready event, before reading it
    EXPECT_GE(dev.syncs, 1);
    EXPECT_LE(dev.syncs, 2);  // one host wait per batch (1 fused, or 2 unfused)
    if (dev.syncs == 1) {
      EXPECT_EQ(dev.copies, 4);  // 2 packed in, 2 unpacked
    }
    e.shutdown();
  });
  expect_all_ok(results);
}

TEST(EngineDevice, ScaleFactorsAndEveryCollectiveOnDeviceBuffers) {
  auto results = run_workers_raw(2, [](const comm::WorldInfo& world) {
    Engine e(comm::Communicator::create(world, "shm"));
    HostAsDevice& dev = attach_device(e, world);
    const float r = static_cast<float>(world.rank + 1);
    std::vector<float> x = {r, -r};
    e.allreduce_async("scaled", x.data(), x.data(), {2}, DataType::kFloat32, ReduceOp::kSum, 0.5,
                      4.0, on_device())
        .wait();
    EXPECT_EQ(x, (std::vector<float>{6.0f, -6.0f}));  // 4 * (0.5 + 1)
    const int scaled_before = dev.scaled;
    std::vector<float> avg = {r};
    e.allreduce_async("avg", avg.data(), avg.data(), {1}, DataType::kFloat32, ReduceOp::kAverage,
                      1.0, 1.0, on_device())
        .wait();
    EXPECT_EQ(avg[0], 1.5f);
    EXPECT_EQ(dev.scaled, scaled_before);  // no factors: the transport's own average
    std::vector<float> m = {r};
    e.allreduce_async("max", m.data(), m.data(), {1}, DataType::kFloat32, ReduceOp::kMax, 1.0, 1.0,
                      on_device())
        .wait();
    EXPECT_EQ(m[0], 2.0f);
    // Factors with min/max/product cannot ride the device sum: refused up front.
    expect_throw_with<InvalidArgument>(
        [&] {
          e.allreduce_async("max2", m.data(), m.data(), {1}, DataType::kFloat32, ReduceOp::kMax,
                            2.0, 1.0, on_device());
        },
        {"'max2'", "scale factors with op max"});
    std::vector<float> bc = {r, r};
    e.broadcast_async("bc", bc.data(), {2}, DataType::kFloat32, 1, on_device()).wait();
    EXPECT_EQ(bc, (std::vector<float>{2.0f, 2.0f}));
    std::vector<float> gathered;
    std::vector<float> mine(world.rank + 1, r);  // rank 0: 1 row, rank 1: 2 rows
    e.allgather_async("ag", mine.data(), {world.rank + 1}, DataType::kFloat32,
                      vector_allocator(gathered), on_device())
        .wait();
    EXPECT_EQ(gathered, (std::vector<float>{1.0f, 2.0f, 2.0f}));
    std::vector<float> rs_in = {r, 2 * r, 3 * r, 4 * r}, rs_out;
    e.reduce_scatter_async("rs", rs_in.data(), {4}, DataType::kFloat32, ReduceOp::kAverage,
                           vector_allocator(rs_out), on_device())
        .wait();
    const std::vector<float> want_rs =
        world.rank == 0 ? std::vector<float>{1.5f, 3.0f} : std::vector<float>{4.5f, 6.0f};
    EXPECT_EQ(rs_out, want_rs);
    EXPECT_GE(dev.collectives, 5);
    // Host operations keep the engine's own communicator meanwhile.
    std::vector<float> h = {r};
    e.allreduce_async("host", h.data(), h.data(), {1}, DataType::kFloat32, ReduceOp::kSum).wait();
    EXPECT_EQ(h[0], 3.0f);
    e.shutdown();
  });
  expect_all_ok(results);
}

// The bodies the host and device paths share (Note [One body per
// collective] in src/engine/executor.cc): alltoall and the uneven
// reduce-scatter on device buffers give the host path's results.
TEST(EngineDevice, AlltoallAndUnevenReduceScatterOnDeviceBuffersMatchTheHostPath) {
  auto results = run_workers_raw(2, [](const comm::WorldInfo& world) {
    Engine e(comm::Communicator::create(world, "shm"));
    attach_device(e, world);
    const float r = static_cast<float>(world.rank + 1);
    for (bool device : {false, true}) {
      const std::string tag = device ? ".dev" : ".host";
      const engine::OpOptions where = device ? on_device() : engine::OpOptions{};
      // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 2 and 1.
      std::vector<float> send = {r, 10 * r, 100 * r}, received;
      std::vector<int64_t> splits =
          world.rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
      auto a = e.alltoall_async("a2a" + tag, send.data(), {3}, DataType::kFloat32, splits,
                                vector_allocator(received), where);
      a.wait();
      EXPECT_EQ(a.received_splits(),
                world.rank == 0 ? (std::vector<int64_t>{1, 2}) : (std::vector<int64_t>{2, 1}));
      EXPECT_EQ(received, world.rank == 0 ? (std::vector<float>{1, 2, 20})
                                          : (std::vector<float>{10, 100, 200}))
          << tag;
      // 3 rows over 2 ranks: rank 0 gets 2, rank 1 gets 1 (averaged).
      std::vector<float> rs_in = {r, 2 * r, 3 * r}, rs_out;
      e.reduce_scatter_async("rs3" + tag, rs_in.data(), {3}, DataType::kFloat32, ReduceOp::kAverage,
                             vector_allocator(rs_out), where)
          .wait();
      EXPECT_EQ(rs_out,
                world.rank == 0 ? (std::vector<float>{1.5f, 3.0f}) : (std::vector<float>{4.5f}))
          << tag;
    }
    e.shutdown();
  });
  expect_all_ok(results);
}

// A collective the executor has no body for (one added to enum Collective
// without its case, the way docs/extending.md warns against) fails its
// entries by name on both paths instead of completing without moving data.
TEST(ExecutorBodies, ACollectiveWithoutABodyIsAnErrorOnTheHostAndTheDevicePath) {
  auto results = run_workers_raw(1, [](const comm::WorldInfo& world) {
    auto host = comm::Communicator::create(world, "shm");
    comm::WorldInfo dev_world = world;
    dev_world.job_id += "-dev";
    comm::Communicator device(
        dev_world, std::make_unique<HostAsDevice>(comm::Communicator::create(dev_world, "shm")));
    std::atomic<comm::Communicator*> device_ptr{&device};
    engine::detail::Executor executor(*host, nullptr, &device_ptr);
    for (MemoryKind memory : {MemoryKind::kHost, MemoryKind::kCuda}) {
      engine::detail::CycleResult cycle;
      engine::detail::ReadyItem item;
      item.request.name = "dummy";
      item.request.collective = static_cast<engine::Collective>(42);
      item.request.memory = memory;
      item.per_rank = {item.request};
      cycle.ready = {item};
      cycle.joined = {0};
      engine::detail::Entry entry;
      entry.request = item.request;
      entry.state = std::make_shared<engine::detail::OpState>(1, nullptr);
      std::vector<engine::detail::Entry*> entries = {&entry};
      std::vector<std::exception_ptr> errors(1);
      executor.run({.items = {0}}, cycle, entries, errors);
      ASSERT_TRUE(errors[0]) << "an unknown collective completed on the "
                             << (memory == MemoryKind::kCuda ? "device" : "host") << " path";
      try {
        std::rethrow_exception(errors[0]);
      } catch (const Error& e) {
        EXPECT_THAT(e.what(),
                    ::testing::AllOf(::testing::HasSubstr("'dummy': the executor has no body for "
                                                          "collective 42"),
                                     ::testing::HasSubstr(
                                         memory == MemoryKind::kCuda ? "device path" : "host path"),
                                     ::testing::HasSubstr("Executor::run_body")));
      }
    }
  });
  expect_all_ok(results);
}

TEST(EngineDevice, RanksDisagreeingOnWhereATensorLivesGetAMismatchNamingIt) {
  auto results = run_workers_raw(2, [](const comm::WorldInfo& world) {
    Engine e(comm::Communicator::create(world, "shm"));
    attach_device(e, world);
    std::vector<float> x = {1.0f};
    engine::OpOptions o = world.rank == 0 ? engine::OpOptions{} : on_device();
    auto h = e.allreduce_async("where", x.data(), x.data(), {1}, DataType::kFloat32, ReduceOp::kSum,
                               1.0, 1.0, o);
    expect_throw_with<MismatchError>([&] { h.wait(); },
                                     {"'where'", "memory host on rank 0 but cuda on rank 1"});
    e.shutdown();
  });
  expect_all_ok(results);
}

TEST(EngineDevice, DeviceBuffersWithoutADeviceCommunicatorAreRefused) {
  auto world = local_world(0, 1, unique_job_id());
  Engine e(comm::Communicator::create(world, "shm"));
  EXPECT_FALSE(e.has_device_communicator());
  std::vector<float> x = {1.0f};
  expect_throw_with<InvalidArgument>(
      [&] {
        e.allreduce_async("x", x.data(), x.data(), {1}, DataType::kFloat32, ReduceOp::kSum, 1.0,
                          1.0, on_device());
      },
      {"no device communicator"});
}

// Issue 27: with the timeline on, a device batch's phases are the GPU's
// (the marks on the stream), not the host's enqueue times: the scripted
// 10/20/10 ms phases appear as such, labelled as GPU time, for a fused
// batch and for a broadcast (no fusion copies: its copy-in phase is the
// 10 ms the scripted GPU spent before the second mark).
TEST(EngineDevice, TimelineShowsTheGpuPhasesFromTheStreamsMarks) {
  const std::string path = "/tmp/lockstep-timeline-dev-" + std::to_string(getpid()) + ".json";
  auto results = run_workers_raw(1, [&](const comm::WorldInfo& world) {
    EngineConfig config = EngineConfig::from_knobs();
    config.timeline_path = path;
    Engine e(comm::Communicator::create(world, "shm"), config);
    attach_device(e, world);
    std::vector<float> a(4, 1.0f), b(2, 2.0f);
    auto ha = e.allreduce_async("a", a.data(), a.data(), {4}, DataType::kFloat32, ReduceOp::kSum,
                                1.0, 1.0, on_device());
    auto hb = e.allreduce_async("b", b.data(), b.data(), {2}, DataType::kFloat32, ReduceOp::kSum,
                                1.0, 1.0, on_device());
    ha.wait();
    hb.wait();
    e.broadcast_async("c", a.data(), {4}, DataType::kFloat32, 0, on_device()).wait();
    e.shutdown();
  });
  expect_all_ok(results);
  nlohmann::json trace = parse_trace(path);
  std::map<std::string, std::map<std::string, double>> dur;  // tensor -> phase -> us
  std::map<int, std::string> rows;
  std::set<std::string> algorithms;
  for (const auto& ev : trace)
    if (ev.value("name", "") == "thread_name") rows[ev["tid"]] = ev["args"]["name"];
  for (const auto& ev : trace) {
    if (ev.value("ph", "") != "X" || !ev.contains("tid")) continue;
    dur[rows[ev["tid"]]][ev["name"]] = ev["dur"];
    if (ev["name"] == "COLLECTIVE") algorithms.insert(ev["args"]["algorithm"]);
  }
  ::unlink(path.c_str());
  EXPECT_EQ(algorithms, std::set<std::string>{"GPU time"});
  for (const char* tensor : {"a", "b"}) {
    SCOPED_TRACE(tensor);
    EXPECT_NEAR(dur[tensor]["FUSE_COPY_IN"], 10e3, 1.0);
    EXPECT_NEAR(dur[tensor]["COLLECTIVE"], 20e3, 1.0);
    EXPECT_NEAR(dur[tensor]["COPY_OUT"], 10e3, 1.0);
  }
  EXPECT_NEAR(dur["c"]["COLLECTIVE"], 20e3, 1.0);
}

}  // namespace
}  // namespace lockstep::testing
