// ElasticState and run_elastic outside a re-forming world: commit/restore is
// bitwise, sync() makes ranks identical, the sampler neither repeats nor
// skips, and run_elastic is a plain call outside elastic mode. (Killing a
// worker under `lockstep run --min-np` is tested in tests/launcher.)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/optim/state_key.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/elastic.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::flat_parameters;
using testing::make_mlp;
using testing::run_torch_workers;
namespace nnf = ::torch::nn::functional;

constexpr int64_t kDataset = 64;
constexpr int64_t kBatch = 4;  // per rank: 8 steps per epoch with 2 ranks

// A model, Adam, a sampler and a DistributedOptimizer under an ElasticState.
struct Trainer {
  ::torch::nn::Sequential model;
  ::torch::optim::Adam adam;
  DistributedSampler sampler;
  DistributedOptimizer dist;
  ElasticState state;
  ::torch::Tensor data = ::torch::arange(kDataset * 8, ::torch::kFloat32).view({kDataset, 8}).sin();

  explicit Trainer(uint64_t seed)
      : model(make_mlp(seed)),
        adam(model->parameters(), ::torch::optim::AdamOptions(0.01)),
        sampler({.dataset_size = kDataset, .rank = rank(), .size = size(), .seed = 3}),
        dist(adam, *model),
        state(*model, adam, &sampler, &dist) {}

  // One step on the next batch (the next epoch when this one is used up).
  std::vector<int64_t> train_step() {
    auto batch = sampler.next_batch(kBatch);
    if (batch.empty()) {
      sampler.set_epoch(sampler.epoch() + 1);
      batch = sampler.next_batch(kBatch);
    }
    auto x = data.index_select(0, ::torch::tensor(batch));
    dist.zero_grad();
    nnf::mse_loss(model->forward(x), x.narrow(1, 0, 4).cos()).backward();
    dist.step();
    ++state.step;
    state.epoch = sampler.epoch();
    return batch;
  }
};

// Every Adam state tensor (and step count), in parameter order, as f64.
::torch::Tensor adam_state(::torch::optim::Adam& adam) {
  std::vector<::torch::Tensor> parts;
  for (const auto& p : adam.param_groups()[0].params()) {
    auto it = adam.state().find(lockstep::optim::state_key(p));
    if (it == adam.state().end()) continue;
    auto& s = static_cast<::torch::optim::AdamParamState&>(*it->second);
    parts.push_back(s.exp_avg().flatten().to(::torch::kFloat64));
    parts.push_back(s.exp_avg_sq().flatten().to(::torch::kFloat64));
    parts.push_back(::torch::tensor({static_cast<double>(s.step())}, ::torch::kFloat64));
  }
  return parts.empty() ? ::torch::empty({0}, ::torch::kFloat64) : ::torch::cat(parts);
}

// Whether every rank holds bitwise the same tensor.
bool same_on_every_rank(const ::torch::Tensor& t, const std::string& name) {
  auto all = allgather(t.flatten().unsqueeze(0).contiguous(), name);
  for (int64_t r = 1; r < all.size(0); ++r)
    if (!::torch::equal(all[r], all[0])) return false;
  return true;
}

TEST(ElasticState, RestoreGivesBitwiseTheCommittedState) {
  run_torch_workers(2, [] {
    Trainer t(7);
    t.state.sync();
    for (int i = 0; i < 3; ++i) t.train_step();
    t.state.values["best"] = 0.125;
    t.state.commit();
    const auto params = flat_parameters(*t.model).clone();
    const auto adam = adam_state(t.adam).clone();
    const int64_t position = t.sampler.global_position();

    std::vector<std::vector<int64_t>> batches;  // crosses into epoch 1
    for (int i = 0; i < 7; ++i) batches.push_back(t.train_step());
    const auto trained = flat_parameters(*t.model).clone();
    t.state.values["best"] = 1;
    ASSERT_FALSE(::torch::equal(flat_parameters(*t.model), params));

    t.state.restore();
    EXPECT_TRUE(::torch::equal(flat_parameters(*t.model), params));
    EXPECT_TRUE(::torch::equal(adam_state(t.adam), adam));
    EXPECT_EQ(t.state.step, 3);
    EXPECT_EQ(t.state.epoch, 0);
    EXPECT_EQ(t.state.values.at("best"), 0.125);
    EXPECT_EQ(t.sampler.epoch(), 0);
    EXPECT_EQ(t.sampler.global_position(), position);
    // Replaying from the commit sees the same batches and ends bitwise equal.
    for (const auto& expected : batches) EXPECT_EQ(t.train_step(), expected);
    EXPECT_TRUE(::torch::equal(flat_parameters(*t.model), trained));
  });
}

TEST(ElasticState, RestoreWithoutCommitNamesTheFix) {
  auto model = make_mlp(1);
  ::torch::optim::Adam adam(model->parameters());
  ElasticState state(*model, adam);
  try {
    state.restore();
    FAIL() << "restore() without a commit did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("commit()"), std::string::npos) << e.what();
  }
}

TEST(ElasticState, SyncMakesRanksWithDifferentStateBitwiseIdentical) {
  run_torch_workers(3, [] {
    // Different seeds, different local Adam steps, counters and positions.
    auto model = make_mlp(100 + rank());
    ::torch::optim::Adam adam(model->parameters(),
                              ::torch::optim::AdamOptions(0.001 * (rank() + 1)));
    for (int i = 0; i <= rank(); ++i) {
      adam.zero_grad();
      model->forward(::torch::ones({2, 8}) * (rank() + 1)).sum().backward();
      adam.step();
    }
    DistributedSampler sampler({.dataset_size = 90, .rank = rank(), .size = size(), .seed = 1});
    sampler.set_epoch(rank() + 2);
    sampler.next_batch(rank() + 1);
    ElasticState state(*model, adam, &sampler);
    state.epoch = rank() + 2;
    state.step = 10 * rank();
    state.values = {{"lr", 0.1 + rank()}, {fmt::format("r{}", rank()), 1.0 / 3}};

    state.sync(0);
    EXPECT_TRUE(same_on_every_rank(flat_parameters(*model), "test.params"));
    EXPECT_TRUE(same_on_every_rank(adam_state(adam), "test.adam"));
    EXPECT_EQ(static_cast<::torch::optim::AdamOptions&>(adam.param_groups()[0].options()).lr(),
              0.001);
    EXPECT_EQ(state.epoch, 2);
    EXPECT_EQ(state.step, 0);
    const std::map<std::string, double> root_values = {{"lr", 0.1}, {"r0", 1.0 / 3}};
    EXPECT_EQ(state.values, root_values);
    EXPECT_EQ(sampler.epoch(), 2);
    EXPECT_EQ(sampler.global_position(), 3);  // rank 0 had taken 1 of 30: 1 * 3 ranks
    // The next batches of the ranks are disjoint (one partition of the rest).
    auto batch = sampler.next_batch(5);
    auto all = allgather(::torch::tensor(batch), "test.batches");
    std::set<int64_t> unique(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
    EXPECT_EQ(unique.size(), 15u);
    // sync() committed: restoring gives back the synced state.
    const auto params = flat_parameters(*model).clone();
    ::torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(1);
    state.restore();
    EXPECT_TRUE(::torch::equal(flat_parameters(*model), params));
  });
}

// Horovod's reset callbacks: after sync() (so after rank 0's hyper-parameters
// arrived) on every rank, in registration order.
TEST(ElasticState, OnResetRunsAfterEverySyncOnEveryRank) {
  run_torch_workers(3, [] {
    auto model = make_mlp(5);
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.5 + rank()));
    ElasticState state(*model, sgd);
    auto& options = static_cast<::torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
    auto lr = [&] { return options.lr(); };
    std::vector<std::string> calls;
    state.on_reset([&] {
      calls.push_back(fmt::format("first, lr {}", lr()));
      options.lr(0.01 * size());
    });
    state.on_reset([&] { calls.push_back("second"); });
    EXPECT_THROW(state.on_reset(nullptr), InvalidArgument);
    EXPECT_TRUE(calls.empty());
    state.sync(0);
    EXPECT_EQ(calls, (std::vector<std::string>{"first, lr 0.5", "second"}));  // rank 0's rate
    EXPECT_DOUBLE_EQ(lr(), 0.03);
    state.restore();  // the commit sync() took holds what the callbacks set
    EXPECT_DOUBLE_EQ(lr(), 0.03);
    state.sync(0);
    EXPECT_EQ(calls.size(), 4u);
  });
}

TEST(ElasticState, CommitAndRestoreOfTheSamplerNeitherRepeatNorSkip) {
  run_torch_workers(2, [] {
    Trainer t(5);
    t.state.sync();
    std::vector<int64_t> seen;  // what this rank processes and keeps
    for (int i = 0; i < 3; ++i) {
      auto b = t.train_step();
      seen.insert(seen.end(), b.begin(), b.end());
    }
    t.state.commit();
    for (int i = 0; i < 2; ++i) t.train_step();  // lost: the "failure" rolls them back
    t.state.restore();
    for (auto b = t.sampler.next_batch(kBatch); !b.empty(); b = t.sampler.next_batch(kBatch))
      seen.insert(seen.end(), b.begin(), b.end());
    auto all = allgather(::torch::tensor(seen), "test.seen");
    std::multiset<int64_t> got(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
    std::multiset<int64_t> expected;
    for (int64_t i = 0; i < kDataset; ++i) expected.insert(i);
    EXPECT_EQ(got, expected);
  });
}

TEST(ElasticState, CheckpointOfTheCommitLoadsBitwise) {
  const auto path =
      (std::filesystem::temp_directory_path() / fmt::format("lockstep-elastic-{}.pt", ::getpid()))
          .string();
  run_torch_workers(2, [&] {
    Trainer t(9);
    t.state.sync();
    for (int i = 0; i < 2; ++i) t.train_step();
    t.state.values["x"] = -2.5;
    t.state.commit();
    t.state.save_checkpoint(path);
    barrier();
    const auto params = flat_parameters(*t.model).clone();
    const auto adam = adam_state(t.adam).clone();
    for (int i = 0; i < 3; ++i) t.train_step();
    ASSERT_TRUE(t.state.load_checkpoint(path));
    EXPECT_TRUE(::torch::equal(flat_parameters(*t.model), params));
    EXPECT_TRUE(::torch::equal(adam_state(t.adam), adam));
    EXPECT_EQ(t.state.step, 2);
    EXPECT_EQ(t.state.values.at("x"), -2.5);
    EXPECT_FALSE(t.state.load_checkpoint(path + ".missing"));
  });
  std::filesystem::remove(path);
}

TEST(RunElastic, OutsideElasticModeSyncsCallsOnceAndPropagates) {
  run_torch_workers(2, [] {
    Trainer t(20 + rank());
    int calls = 0;
    run_elastic(t.state, [&](ElasticState& s) {
      ++calls;
      EXPECT_EQ(s.generation(), 0);
      EXPECT_EQ(s.reformations(), 0);
      EXPECT_TRUE(same_on_every_rank(flat_parameters(*t.model), "test.synced"));
      t.train_step();
    });
    EXPECT_EQ(calls, 1);
    EXPECT_THROW(run_elastic(t.state, [](ElasticState&) { throw PeerFailure(1, "test"); }),
                 PeerFailure);
    EXPECT_THROW(
        run_elastic(t.state, [](ElasticState& s) { throw engine::WorldChanged(s.generation()); }),
        engine::WorldChanged);
  });
}

TEST(DistributedOptimizer, ResetDropsGradientsInFlight) {
  run_torch_workers(2, [] {
    auto model = make_mlp(3);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model, {.overlap = Overlap::kOn});
    dist.reset();  // nothing in flight: a no-op
    // Backward submits every gradient; reset() instead of step() drops them.
    model->forward(::torch::ones({2, 8})).sum().backward();
    dist.reset();
    // Usable again: a full step works and keeps the ranks equal.
    dist.zero_grad();
    model->forward(::torch::ones({2, 8}) * (rank() + 1)).sum().backward();
    dist.step();
    EXPECT_TRUE(same_on_every_rank(flat_parameters(*model), "test.after_reset"));
  });
}

}  // namespace
}  // namespace lockstep::torch
