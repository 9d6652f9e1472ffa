// Issue 40: SameBitsStep gives bitwise the same full training state
// (parameters, BatchNorm running statistics, Adam state) at 1, 2 and 4
// workers and across a checkpoint resume at another world size; plain data
// parallelism on the same model and data does not (so the comparison can
// fail).
// First: its TORCH_MODULE names torch::nn unqualified, which breaks once
// lockstep::torch is declared.
#include "lockstep/optim/ghost_batch_norm.h"
#include "lockstep/torch/same_bits.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>

#include "helpers.h"
#include "same_bits_model.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/sync_batch_norm.h"

namespace lockstep::torch {
namespace {

namespace nn = ::torch::nn;
constexpr int64_t kGlobalBatch = testing::kSameBitsGlobalBatch,
                  kMicroBatches = testing::kSameBitsMicroBatches, kSteps = testing::kSameBitsSteps;
using Net = testing::SameBitsNet;
using Data = testing::SameBitsData;

struct Span {
  int from = 0, to = kSteps;
  std::string load, save, hash_file;
};

Span steps(int from, int to, std::string load, std::string save) {
  Span span;
  span.from = from;
  span.to = to;
  span.load = std::move(load);
  span.save = std::move(save);
  return span;
}

// Rank 0 writes its state hash to `file`. With `ranks_agree`, every rank
// must hold the same state (plain data parallelism keeps per-rank BatchNorm
// running statistics, so there they differ).
void publish_hash(const Net& net, const ::torch::optim::Optimizer& opt, const std::string& file,
                  bool ranks_agree) {
  const uint64_t h = state_hash(net, opt);
  auto mine = ::torch::tensor({static_cast<int64_t>(h)}, ::torch::kLong);
  auto all = allgather(mine, "test.hash");
  for (int64_t r = 0; ranks_agree && r < all.numel(); ++r)
    EXPECT_EQ(all[r].item<int64_t>(), static_cast<int64_t>(h)) << "rank " << r;
  if (rank() == 0) std::ofstream(file) << fmt::format("{:016x}", h);
}

void train_same_bits(const Span& run) {
  ::torch::manual_seed(1);
  Net net;
  ::torch::optim::Adam opt(net.parameters(), ::torch::optim::AdamOptions(1e-2));
  SameBitsOptions options;
  options.micro_batches = kMicroBatches;
  options.seed = 42;
  SameBitsStep driver(net, opt, options);
  if (!run.load.empty()) {
    TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint(run.load, net, opt, progress));
    driver.set_steps_done(progress.step);
  }
  const Data data;
  const int64_t m = kGlobalBatch / kMicroBatches;
  std::vector<double> losses;
  for (int s = run.from; s < run.to; ++s)
    losses.push_back(driver.step([&](const MicroBatch& micro) {
      auto [x, y] = data.batch(micro.step, micro.index * m, m);
      return ::torch::nn::functional::cross_entropy(net.forward(x), y);
    }));
  if (run.from == 0 && run.to == kSteps) {  // it trains: the last steps' loss is lower
    EXPECT_LT(losses.back() + losses[kSteps - 2], losses[0] + losses[1]);
  }
  if (!run.save.empty()) {
    TrainingProgress progress;
    progress.step = driver.steps_done();
    save_checkpoint(run.save, net, opt, progress);
  }
  publish_hash(net, opt, run.hash_file, true);
}

// Plain data parallelism: each rank one batch of B/n, averaged f32 gradients.
void train_default(const Span& run) {
  ::torch::manual_seed(1);
  Net net;
  ::torch::optim::Adam opt(net.parameters(), ::torch::optim::AdamOptions(1e-2));
  ::torch::manual_seed(42 + static_cast<uint64_t>(rank()));
  const Data data;
  const int64_t share = kGlobalBatch / size();
  for (int s = run.from; s < run.to; ++s) {
    opt.zero_grad();
    auto [x, y] = data.batch(s, rank() * share, share);
    ::torch::nn::functional::cross_entropy(net.forward(x), y).backward();
    int i = 0;
    for (auto& p : net.parameters()) allreduce_(p.mutable_grad(), fmt::format("g.{}", i++));
    opt.step();
  }
  publish_hash(net, opt, run.hash_file, false);
}

// run_torch_workers over the Gloo backend (a FileStore in `store`): the
// communicator is made by name, so the test cannot silently run on shm.
void run_gloo_workers(int size, const std::function<void()>& body, const std::string& store) {
  std::filesystem::create_directories(store);
  lockstep::testing::MultiProcOptions options;
  options.env = {{"LOCKSTEP_BIND_TO", "none"},
                 {"LOCKSTEP_INTRA_OP_THREADS", "1"},
                 {"LOCKSTEP_GLOO_FILE_STORE", store}};
  options.deadline = std::chrono::seconds(240);
  auto results = lockstep::testing::run_workers_raw(
      size,
      [&](const comm::WorldInfo& world) {
        auto comm = comm::Communicator::create(world, "gloo");
        ASSERT_EQ(comm->backend_name(), "gloo");
        engine::init(std::move(comm));
        lockstep::torch::init();
        body();
        lockstep::torch::shutdown();
      },
      options);
  lockstep::testing::expect_all_ok(results);
}

class SameBitsTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / fmt::format("lockstep_same_bits_{}", ::getpid());
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string hash_of(int np, Span run, void (*train)(const Span&), bool gloo = false) {
    run.hash_file = (dir_ / fmt::format("hash.{}", counter_++)).string();
    if (gloo)
      run_gloo_workers(
          np, [&] { train(run); }, (dir_ / fmt::format("gloo.{}", counter_)).string());
    else
      testing::run_torch_workers(np, [&] { train(run); });
    std::ifstream in(run.hash_file);
    std::string hash;
    in >> hash;
    EXPECT_EQ(hash.size(), 16u) << "np " << np << " wrote no hash";
    return hash;
  }
  int counter_ = 0;
};

TEST_F(SameBitsTest, FullStateIsBitwiseEqualAtOneTwoAndFourWorkers) {
  const auto h1 = hash_of(1, {}, train_same_bits);
  EXPECT_EQ(hash_of(2, {}, train_same_bits), h1);
  EXPECT_EQ(hash_of(4, {}, train_same_bits), h1);
}

TEST_F(SameBitsTest, WithTheModeOffTheWorldSizeChangesTheState) {
  EXPECT_NE(hash_of(1, {}, train_default), hash_of(2, {}, train_default));
}

TEST_F(SameBitsTest, ResumeAtAnotherWorldSizeGivesTheSameBits) {
  const auto straight = hash_of(2, {}, train_same_bits);
  const auto path = (dir_ / "step10.ckpt").string();
  hash_of(2, steps(0, 10, "", path), train_same_bits);
  EXPECT_EQ(hash_of(1, steps(10, kSteps, path, ""), train_same_bits), straight);
  EXPECT_EQ(hash_of(4, steps(10, kSteps, path, ""), train_same_bits), straight);
}

// The int64 SUM and f32 MAX allreduces are exact on every backend, so Gloo
// gives the bits of shm. (MPI needs mpirun: same_bits_backends_test.sh.)
TEST_F(SameBitsTest, GlooGivesTheBitsOfShmAtTwoAndFourWorkers) {
#ifndef LOCKSTEP_TEST_GLOO
  GTEST_SKIP() << "built without the Gloo backend (LOCKSTEP_WITH_GLOO=OFF)";
#else
  const auto shm = hash_of(1, {}, train_same_bits);
  EXPECT_EQ(hash_of(2, {}, train_same_bits, /*gloo=*/true), shm);
  EXPECT_EQ(hash_of(4, {}, train_same_bits, /*gloo=*/true), shm);
  // And the mode off still moves with the world size there.
  EXPECT_NE(hash_of(1, {}, train_default, true), hash_of(2, {}, train_default, true));
#endif
}

TEST(SameBits, WorldSizesThatDoNotDivideKAreRefusedByName) {
  EXPECT_EQ(same_bits_world_sizes(8), (std::vector<int64_t>{1, 2, 4, 8}));
  testing::run_torch_workers(3, [] {
    Net net;
    ::torch::optim::SGD opt(net.parameters(), 0.1);
    try {
      SameBitsOptions options;
      options.micro_batches = 8;
      SameBitsStep driver(net, opt, options);
      ADD_FAILURE() << "3 workers for K = 8 was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("over 3 workers"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("1, 2, 4, 8"), std::string::npos) << e.what();
    }
  });
}

TEST(SameBits, SyncAndGhostBatchNormAreRefusedByName) {
  nn::Sequential sync(nn::Linear(4, 4), SyncBatchNorm(4));
  ::torch::optim::SGD opt1(sync->parameters(), 0.1);
  EXPECT_THROW(
      {
        try {
          SameBitsStep refused(*sync, opt1, {});
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("SyncBatchNorm"), std::string::npos);
          throw;
        }
      },
      InvalidArgument);
  nn::Sequential ghost(nn::Linear(4, 4),
                       optim::GhostBatchNorm1d(optim::GhostBatchNormOptions(4, 2)));
  ::torch::optim::SGD opt2(ghost->parameters(), 0.1);
  EXPECT_THROW(SameBitsStep(*ghost, opt2, {}), InvalidArgument);
}

// The applied gradient is the mean of the K micro-batch gradients, computed
// another way here (f64 sum of separate backward passes), to within 1 ulp.
TEST(SameBits, GradientIsTheMeanOfTheMicroBatchGradients) {
  testing::run_torch_workers(1, [] {
    ::torch::manual_seed(3);
    nn::Linear lin(6, 3);
    ::torch::optim::SGD opt(lin->parameters(), 0.0);
    auto x = ::torch::randn({16, 6}), y = ::torch::randn({16, 3});
    auto loss = [&](const MicroBatch& micro) {
      return (lin->forward(x.narrow(0, micro.index * 4, 4)) - y.narrow(0, micro.index * 4, 4))
          .pow(2)
          .mean();
    };
    SameBitsOptions options;
    options.micro_batches = 4;
    SameBitsStep driver(*lin, opt, options);
    driver.step(loss);
    const auto got = lin->weight.grad().clone();
    auto reference = ::torch::zeros_like(got, ::torch::kFloat64);
    for (int64_t j = 0; j < 4; ++j) {
      lin->zero_grad();
      loss({0, j, 4}).backward();
      reference += lin->weight.grad().to(::torch::kFloat64);
    }
    reference = (reference / 4).to(::torch::kFloat32);
    const float tol = 2e-7f * reference.abs().max().item<float>();
    EXPECT_GT(reference.abs().max().item<float>(), 0.0f);
    EXPECT_LE((got - reference).abs().max().item<float>(), tol);
  });
}

}  // namespace
}  // namespace lockstep::torch
