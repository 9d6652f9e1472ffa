// Single-process tests: sampler, checkpoints, placement. References are
// computed another way (sets, an uninterrupted run, hand-worked plans).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/torch/torch.h"
#include "comm/transport/shm/numa.h"
#include "support/fake_sysfs.h"
#include "support/scratch.h"
#include "torch/cpu_load.h"

namespace lockstep::torch {
namespace {

std::vector<DistributedSampler> samplers(int64_t n, int size, bool drop_last = false,
                                         SamplingScheme scheme = SamplingScheme::kPartition) {
  std::vector<DistributedSampler> out;
  for (int r = 0; r < size; ++r)
    out.emplace_back(DistributedSamplerOptions{.dataset_size = n,
                                               .rank = r,
                                               .size = size,
                                               .seed = 5,
                                               .drop_last = drop_last,
                                               .scheme = scheme});
  return out;
}

TEST(Sampler, PartitionIsDisjointAndCovering) {
  auto ranks = samplers(12, 3);
  std::multiset<int64_t> seen;
  for (auto& s : ranks) seen.insert(s.indices().begin(), s.indices().end());
  std::multiset<int64_t> expected;
  for (int64_t i = 0; i < 12; ++i) expected.insert(i);
  EXPECT_EQ(seen, expected);
}

TEST(Sampler, PaddingGivesEqualBatchCountsAndCoversAll) {
  for (int64_t n : {10, 11, 13, 1001}) {
    auto ranks = samplers(n, 4);
    std::set<int64_t> seen;
    for (auto& s : ranks) {
      EXPECT_EQ(s.num_samples(), (n + 3) / 4);
      EXPECT_EQ(s.num_batches(3), ranks[0].num_batches(3));
      seen.insert(s.indices().begin(), s.indices().end());
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);  // padding only repeats
  }
}

TEST(Sampler, DropLastGivesEqualCountsWithoutRepeats) {
  auto ranks = samplers(11, 4, /*drop_last=*/true);
  std::set<int64_t> seen;
  for (auto& s : ranks) {
    EXPECT_EQ(s.num_samples(), 2);
    seen.insert(s.indices().begin(), s.indices().end());
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(Sampler, ReshufflesPerEpochDeterministically) {
  auto a = samplers(100, 2)[0];
  auto b = samplers(100, 2)[0];
  auto epoch0 = a.indices();
  a.set_epoch(1);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), epoch0);
  EXPECT_EQ(a.indices(), b.indices());
}

TEST(Sampler, IndependentSchemeDiffersPerRank) {
  auto ranks = samplers(100, 2, false, SamplingScheme::kIndependent);
  EXPECT_EQ(ranks[0].num_samples(), 50);
  EXPECT_NE(ranks[0].indices(), ranks[1].indices());
  std::set<int64_t> unique(ranks[0].indices().begin(), ranks[0].indices().end());
  EXPECT_EQ(unique.size(), 50u);  // a permutation's prefix: no repeats within a rank
}

TEST(Sampler, SaveAndRestoreContinuesWithTheNextBatch) {
  auto a = samplers(50, 2)[1];
  a.set_epoch(3);
  a.next_batch(4);
  auto saved = a.save();
  auto expected = a.next_batch(4);
  auto b = samplers(50, 2)[1];
  b.load(saved);
  EXPECT_EQ(b.epoch(), 3);
  EXPECT_EQ(b.next_batch(4), expected);
}

TEST(Sampler, RejectsBadRank) {
  EXPECT_THROW(DistributedSampler({.dataset_size = 5, .rank = 2, .size = 2}), InvalidArgument);
}

// Every rank of a world consumes `batches` batches of `batch` indices of
// epoch `epoch`; returns what they consumed and their (common) global position.
std::pair<std::multiset<int64_t>, int64_t> consume(std::vector<DistributedSampler>& ranks,
                                                   int64_t epoch, int batches, int64_t batch) {
  std::multiset<int64_t> seen;
  for (auto& s : ranks) {
    s.set_epoch(epoch);
    for (int b = 0; b < batches; ++b) {
      auto indices = s.next_batch(batch);
      seen.insert(indices.begin(), indices.end());
    }
    EXPECT_EQ(s.global_position(), ranks[0].global_position());
  }
  return {seen, ranks[0].global_position()};
}

// The rest of the epoch in a world of `size` ranks; checks equal counts.
std::multiset<int64_t> resume_rest(int64_t n, int64_t epoch, int64_t global_position, int size,
                                   SamplingScheme scheme = SamplingScheme::kPartition) {
  std::multiset<int64_t> seen;
  int64_t count = -1;
  for (auto& s : samplers(n, 1, false, scheme)) {
    for (int r = 0; r < size; ++r) {
      s.resume(epoch, global_position, r, size);
      if (count < 0) count = s.num_samples();
      EXPECT_EQ(s.num_samples(), count) << "rank " << r << " of " << size;
      int64_t got = 0;
      for (auto b = s.next_batch(7); !b.empty(); b = s.next_batch(7)) {
        seen.insert(b.begin(), b.end());
        got += static_cast<int64_t>(b.size());
      }
      EXPECT_EQ(got, count);
    }
  }
  return seen;
}

TEST(Sampler, ResumeInAnotherWorldSizeVisitsEveryIndexExactlyOnce) {
  const int64_t n = 180;  // divisible by 4, and the remainder 120 by 3 and 5
  for (int new_size : {3, 5}) {
    auto old_world = samplers(n, 4);
    auto [seen, position] = consume(old_world, 2, 3, 5);
    EXPECT_EQ(position, 60);
    auto rest = resume_rest(n, 2, position, new_size);
    EXPECT_EQ(static_cast<int64_t>(rest.size()), n - 60);
    seen.insert(rest.begin(), rest.end());
    std::multiset<int64_t> expected;
    for (int64_t i = 0; i < n; ++i) expected.insert(i);
    EXPECT_EQ(seen, expected) << "resumed with " << new_size << " ranks";
  }
}

TEST(Sampler, ResumeWithPaddingCoversTheRestWithEqualCounts) {
  const int64_t n = 182;
  auto old_world = samplers(n, 4);
  auto [seen, position] = consume(old_world, 1, 2, 5);
  auto rest = resume_rest(n, 1, position, 3);  // 142 left: 48 each, 2 of them padding
  std::set<int64_t> all(seen.begin(), seen.end());
  all.insert(rest.begin(), rest.end());
  EXPECT_EQ(static_cast<int64_t>(all.size()), n);
  EXPECT_EQ(static_cast<int64_t>(rest.size()), 144);
}

TEST(Sampler, ResumeAtZeroEqualsAFreshSampler) {
  for (auto scheme : {SamplingScheme::kPartition, SamplingScheme::kIndependent}) {
    for (bool drop_last : {false, true}) {
      auto fresh = samplers(50, 3, drop_last, scheme)[1];
      fresh.set_epoch(4);
      auto resumed = samplers(50, 2, drop_last, scheme)[0];
      resumed.resume(4, 0, 1, 3);
      EXPECT_EQ(resumed.num_samples(), fresh.num_samples());
      EXPECT_EQ(resumed.indices(), fresh.indices());
      EXPECT_EQ(resumed.next_batch(4), fresh.next_batch(4));
    }
  }
}

TEST(Sampler, ResumeInTheSameWorldEqualsRestore) {
  auto a = samplers(50, 3)[2];
  a.set_epoch(1);
  a.next_batch(4);
  auto b = samplers(50, 3)[2];
  b.resume(1, a.global_position(), 2, 3);
  EXPECT_EQ(b.next_batch(100), a.next_batch(100));
}

TEST(Sampler, IndependentResumeKeepsTheShareDone) {
  auto ranks = samplers(50, 2, false, SamplingScheme::kIndependent);
  ranks[0].next_batch(10);
  EXPECT_EQ(ranks[0].global_position(), 20);
  ranks[0].resume(0, 20, 3, 4);
  EXPECT_EQ(ranks[0].num_samples(), 13);
  EXPECT_EQ(ranks[0].state().position, 5);
}

TEST(Sampler, SaveAndLoadKeepTheOffsetAndReadTheOldFormat) {
  auto a = samplers(50, 3)[1];
  a.resume(2, 9, 1, 3);
  a.next_batch(2);
  auto b = samplers(50, 3)[1];
  b.load(a.save());
  EXPECT_EQ(b.state().offset, 9);
  EXPECT_EQ(b.global_position(), a.global_position());
  EXPECT_EQ(b.next_batch(5), a.next_batch(5));
  b.load("3 2");  // before offset existed
  EXPECT_EQ(b.state().offset, 0);
  EXPECT_EQ(b.state().position, 2);
  b.set_epoch(4);
  EXPECT_EQ(b.state().offset, 0);
}

void expect_invalid_naming(const std::function<void()>& call, const std::string& field) {
  try {
    call();
    ADD_FAILURE() << "no InvalidArgument naming " << field;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Sampler, ResumeRejectsBadArgumentsNamingTheField) {
  auto s = samplers(10, 2, /*drop_last=*/true)[0];
  expect_invalid_naming([&] { s.resume(-1, 0, 0, 2); }, "epoch");
  expect_invalid_naming([&] { s.resume(0, -1, 0, 2); }, "global_position");
  expect_invalid_naming([&] { s.resume(0, 11, 0, 2); }, "global_position");
  expect_invalid_naming([&] { s.resume(0, 0, 2, 2); }, "rank");
  expect_invalid_naming([&] { s.resume(0, 0, 0, 0); }, "size");
  expect_invalid_naming([&] { s.resume(0, 0, 0, 11); }, "drop_last");
  expect_invalid_naming([&] { s.load("1 0 -3"); }, "offset");
}

// ---- checkpoints

struct TrainingRun {
  ::torch::nn::Sequential model;
  std::unique_ptr<::torch::optim::Adam> adam;
  DistributedSampler sampler{{.dataset_size = 40, .seed = 9}};
  ::torch::Tensor data = ::torch::arange(40 * 6, ::torch::kFloat32).view({40, 6}).sin();
  int64_t step = 0;

  TrainingRun() {
    ::torch::manual_seed(1);
    model = ::torch::nn::Sequential(::torch::nn::Linear(6, 8), ::torch::nn::Dropout(0.3),
                                    ::torch::nn::ReLU(), ::torch::nn::Linear(8, 1));
    adam = std::make_unique<::torch::optim::Adam>(model->parameters(),
                                                  ::torch::optim::AdamOptions(0.01));
  }

  // One step; the next epoch starts when this one is used up.
  float train_step() {
    auto batch = sampler.next_batch(8);
    if (batch.empty()) {
      sampler.set_epoch(sampler.epoch() + 1);
      batch = sampler.next_batch(8);
    }
    auto x = data.index_select(0, ::torch::tensor(batch));
    adam->zero_grad();
    auto loss = (model->forward(x) - x.sum(1, true)).pow(2).mean();  // dropout draws from the RNG
    loss.backward();
    adam->step();
    ++step;
    return loss.item<float>();
  }
  TrainingProgress progress() const {
    return {.epoch = sampler.epoch(), .step = step, .sampler = sampler.save(), .user = "u"};
  }
};

std::string temp_dir() {
  return lockstep::testing::scratch_folder(
             "lockstep-ckpt", ::testing::UnitTest::GetInstance()->current_test_info()->name())
      .string();
}

TEST(Checkpoint, ResumedRunContinuesBitwise) {
  ::torch::set_num_threads(1);
  const std::string path = temp_dir() + "/ckpt.pt";
  std::vector<float> uninterrupted, resumed;
  {
    TrainingRun run;
    for (int i = 0; i < 12; ++i) {
      if (i == 7) save_checkpoint(path, *run.model, *run.adam, run.progress());
      float loss = run.train_step();
      if (i >= 7) uninterrupted.push_back(loss);
    }
  }
  {
    ::torch::manual_seed(12345);  // whatever the RNG did meanwhile
    TrainingRun run;
    run.adam->param_groups()[0].options().set_lr(0.5);  // must come back as 0.01
    TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint(path, *run.model, *run.adam, progress));
    EXPECT_DOUBLE_EQ(run.adam->param_groups()[0].options().get_lr(), 0.01);
    EXPECT_EQ(progress.step, 7);
    EXPECT_EQ(progress.user, "u");
    run.sampler.load(progress.sampler);
    run.step = progress.step;
    for (int i = 7; i < 12; ++i) resumed.push_back(run.train_step());
  }
  EXPECT_EQ(resumed, uninterrupted);
}

TEST(Checkpoint, MissingFileReturnsFalseAndCorruptThrows) {
  TrainingRun run;
  TrainingProgress p;
  const std::string dir = temp_dir();
  EXPECT_FALSE(load_checkpoint(dir + "/none.pt", *run.model, *run.adam, p));
  write_file_atomically(dir + "/bad.pt", "not a checkpoint");
  EXPECT_THROW(load_checkpoint(dir + "/bad.pt", *run.model, *run.adam, p), Error);
}

// A writer killed at random points never leaves a torn checkpoint: the file
// is always a complete old or new version.
TEST(Checkpoint, KillDuringWriteLeavesPreviousLoadable) {
  ::torch::set_num_threads(1);
  const std::string path = temp_dir() + "/ckpt.pt";
  auto big = ::torch::nn::Linear(1500, 1500);  // ~9 MB per checkpoint
  ::torch::optim::SGD sgd(big->parameters(), 0.1);
  save_checkpoint(path, *big, sgd, {.step = 1, .sampler = {}, .user = {}});
  for (int delay_ms : {1, 5, 20, 60}) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int64_t step = 2;; ++step)
        save_checkpoint(path, *big, sgd, {.step = step, .sampler = {}, .user = {}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    auto fresh = ::torch::nn::Linear(1500, 1500);
    ::torch::optim::SGD fresh_sgd(fresh->parameters(), 0.1);
    TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint(path, *fresh, fresh_sgd, progress)) << delay_ms;
    EXPECT_GE(progress.step, 1);
    EXPECT_TRUE(::torch::equal(fresh->weight, big->weight));
  }
}

// ---- DataLoader sampler

// Yields each example's own index, so batches show which indices were drawn.
struct IndexDataset : ::torch::data::datasets::Dataset<IndexDataset, int64_t> {
  explicit IndexDataset(size_t n) : n(n) {}
  int64_t get(size_t index) override { return static_cast<int64_t>(index); }
  c10::optional<size_t> size() const override { return n; }
  size_t n;
};

// Issue 16.8: a sampler that plugs into LibTorch's DataLoader, with the same
// number of batches on every rank (else a rank waits for a collective the
// others never issue) and a new shuffle every epoch.
TEST(DataLoaderSampler, EveryRankGetsTheSameBatchCountAndEpochsReshuffle) {
  constexpr size_t kSize = 103, kBatch = 8, kRanks = 3;
  std::vector<std::vector<std::vector<int64_t>>> seen(kRanks);  // [rank][epoch] -> indices
  std::vector<size_t> batches(kRanks * 2, 0);
  for (size_t r = 0; r < kRanks; ++r) {
    auto loader = ::torch::data::make_data_loader(IndexDataset(kSize),
                                                  DistributedDataSampler(kSize, kRanks, r),
                                                  ::torch::data::DataLoaderOptions(kBatch));
    for (size_t epoch = 0; epoch < 2; ++epoch) {
      seen[r].emplace_back();
      for (auto& batch : *loader) {
        ++batches[r * 2 + epoch];
        seen[r][epoch].insert(seen[r][epoch].end(), batch.begin(), batch.end());
      }
    }
  }
  for (size_t i = 1; i < batches.size(); ++i) EXPECT_EQ(batches[i], batches[0]) << i;
  EXPECT_EQ(batches[0], 5u);  // ceil(ceil(103 / 3) / 8)
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> all;
    for (size_t r = 0; r < kRanks; ++r) all.insert(seen[r][epoch].begin(), seen[r][epoch].end());
    EXPECT_EQ(all.size(), kSize) << "epoch " << epoch << " misses samples";
  }
  EXPECT_NE(seen[0][0], seen[0][1]) << "the second epoch repeated the first one's order";
  DistributedDataSampler dropping(kSize, kRanks, 0, /*allow_duplicates=*/false);
  EXPECT_EQ(dropping.batches_per_epoch(kBatch), 5u);  // floor(103 / 3) = 34 -> 5 batches
}

TEST(DataLoaderSampler, SetEpochChoosesTheShuffleAndDefaultsComeFromTheWorld) {
  DistributedDataSampler a(50), b(50);  // before init(): rank 0 of 1
  EXPECT_EQ(a.indices().options().size, 1);
  a.set_epoch(3);
  a.reset();
  b.set_epoch(3);
  b.reset();
  EXPECT_EQ(a.next(50), b.next(50));
  EXPECT_THROW(DistributedDataSampler(10, 2, 2), InvalidArgument);
}

TEST(DataLoaderSampler, NextTensorBatchGathersTheRowsOfTheSampledIndices) {
  auto data = ::torch::arange(20).reshape({10, 2});
  auto targets = ::torch::arange(10) * 100;
  DistributedSampler sampler({.dataset_size = 10, .rank = 1, .size = 2, .seed = 9});
  std::vector<int64_t> expected = DistributedSampler(sampler.options()).next_batch(4);
  auto batch = next_tensor_batch(sampler, data, targets, 4);
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->data.size(0), 4);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(batch->target[static_cast<int64_t>(i)].item<int64_t>(), expected[i] * 100);
    EXPECT_EQ(batch->data[static_cast<int64_t>(i)][1].item<int64_t>(), expected[i] * 2 + 1);
  }
  EXPECT_TRUE(next_tensor_batch(sampler, data, targets, 4).has_value());  // rows 4..5 of 5
  EXPECT_FALSE(next_tensor_batch(sampler, data, targets, 4).has_value());
  EXPECT_THROW(next_tensor_batch(sampler, data.narrow(0, 0, 9), targets, 4), InvalidArgument);
}

// ---- placement

TEST(Placement, CoreBindingSplitsCpusIntoBlocks) {
  std::vector<int> cpus{0, 1, 2, 3};
  auto p0 = plan_placement(0, 2, cpus, BindTo::kCore);
  auto p1 = plan_placement(1, 2, cpus, BindTo::kCore);
  EXPECT_EQ(p0.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(p1.cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(p1.intra_op_threads, 2);
}

using lockstep::testing::cpu_range;
using lockstep::testing::fake_sysfs_tree;
using lockstep::testing::interleaved_two_socket;

// The CPUs of `local_size` workers placed by core on a host read from `sys`.
std::vector<std::vector<int>> place_all(int local_size, const std::string& sys, int ncpus) {
  const std::vector<int> cpus = cpu_range(ncpus);
  const std::vector<CpuPlace> topology = read_cpu_topology(cpus, sys);
  std::vector<std::vector<int>> out;
  for (int r = 0; r < local_size; ++r)
    out.push_back(plan_placement(r, local_size, cpus, BindTo::kCore, 0, topology).cpus);
  return out;
}

std::vector<int> cpus_from(std::initializer_list<std::pair<int, int>> ranges) {
  std::vector<int> out;
  for (auto [lo, hi] : ranges)
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  return out;
}

// Regression for issue 28: on a two-socket host that interleaves nodes and
// hyper-threads (node 0 = 0-15,32-47, CPU k and k+32 one core), CPU-number
// blocks gave ranks 0 and 2 the two threads of node 0's cores and node
// groups {0,2},{1,3}. Placement by (node, package, core) gives whole cores,
// a node filled before the next.
TEST(Placement, WholeCoresWithinANodeOnAnInterleavedSmtHost) {
  const std::string sys = fake_sysfs_tree("placement-smt", interleaved_two_socket(16));
  EXPECT_EQ(place_all(4, sys, 64),
            (std::vector<std::vector<int>>{
                cpus_from({{0, 7}, {32, 39}}), cpus_from({{8, 15}, {40, 47}}),
                cpus_from({{16, 23}, {48, 55}}), cpus_from({{24, 31}, {56, 63}})}));
  EXPECT_EQ(place_all(2, sys, 64),
            (std::vector<std::vector<int>>{cpus_from({{0, 15}, {32, 47}}),
                                           cpus_from({{16, 31}, {48, 63}})}));
  const auto eight = place_all(8, sys, 64);
  for (int r = 0; r < 8; ++r) {
    const int first = (r < 4 ? 0 : 16) + (r % 4) * 4;  // four whole cores each
    EXPECT_EQ(eight[r], cpus_from({{first, first + 3}, {first + 32, first + 35}})) << r;
  }
  // The two-level shm allreduce finds the nodes' groups contiguous.
  for (int n : {2, 4, 8, 16}) {
    std::vector<int> nodes;
    for (const auto& cpus : place_all(n, sys, 64))
      nodes.push_back(comm::shm::numa_node_of(cpus, sys + "/devices/system/node"));
    std::string why;
    EXPECT_EQ(comm::shm::groups_from_nodes(nodes, &why), n == 2 ? 1 : 2) << n << ": " << why;
  }
}

// One node, no SMT, or no sysfs at all: the blocks of CPU numbers as before.
TEST(Placement, HostsWithoutNodesOrSmtKeepCpuNumberBlocks) {
  std::vector<CpuPlace> flat;
  for (int c = 0; c < 8; ++c) flat.push_back(CpuPlace{c, 0, 0, c});
  const std::string sys = fake_sysfs_tree("placement-flat", flat);
  const std::vector<std::vector<int>> blocks{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  EXPECT_EQ(place_all(4, sys, 8), blocks);
  EXPECT_EQ(place_all(4, "/nonexistent/lockstep/sys", 8), blocks);
}

// Overlap only where the transfer does not take a computing core.
TEST(Placement, OverlapPaysAcrossHostsOrWithASpareCore) {
  EXPECT_TRUE(overlap_pays(/*one_host=*/false, 1, 1));
  EXPECT_FALSE(overlap_pays(/*one_host=*/true, 1, 1));
  EXPECT_FALSE(overlap_pays(/*one_host=*/true, 4, 4));
  EXPECT_TRUE(overlap_pays(/*one_host=*/true, 4, 3));
}

// The option wins over LOCKSTEP_OVERLAP, the variable over the auto rule,
// and a bad value is named; DistributedOptimizer and ShardedOptimizer share
// this resolution.
TEST(Placement, OverlapRequestResolvesOptionThenVariable) {
  using detail::resolve_overlap;
  ::setenv("LOCKSTEP_OVERLAP", "on", 1);
  EXPECT_FALSE(resolve_overlap(Overlap::kOff, 2).overlap);
  EXPECT_TRUE(resolve_overlap(Overlap::kAuto, 2).overlap);
  EXPECT_TRUE(resolve_overlap(Overlap::kAuto, 2).forced);
  ::setenv("LOCKSTEP_OVERLAP", "off", 1);
  EXPECT_FALSE(resolve_overlap(Overlap::kAuto, 2).overlap);
  EXPECT_FALSE(resolve_overlap(Overlap::kAuto, 2).forced);
  EXPECT_TRUE(resolve_overlap(Overlap::kOn, 2).forced);
  ::setenv("LOCKSTEP_OVERLAP", "sometimes", 1);
  EXPECT_THROW(resolve_overlap(Overlap::kAuto, 2), InvalidArgument);
  EXPECT_TRUE(resolve_overlap(Overlap::kOn, 2).overlap);
  ::unsetenv("LOCKSTEP_OVERLAP");
  EXPECT_FALSE(resolve_overlap(Overlap::kAuto, 1).overlap);
}

// Regression: apply_placement bound only the calling thread, so the engine's
// background thread, started earlier, ran on the other workers' cores.
TEST(Placement, BindsThreadsStartedBeforeIt) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  std::atomic<pid_t> tid{0};
  std::atomic<bool> stop{false};
  std::thread early([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (tid == 0) std::this_thread::yield();
  Placement p;
  p.intra_op_threads = ::at::get_num_threads();
  p.cpus = {allowed.back()};
  apply_placement(p);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(tid, sizeof(mask), &mask), 0);
  EXPECT_EQ(CPU_COUNT(&mask), 1);
  EXPECT_TRUE(CPU_ISSET(allowed.back(), &mask));
  stop = true;
  early.join();
  // Give the rest of the suite its CPUs back.
  CPU_ZERO(&mask);
  for (int c : allowed) CPU_SET(c, &mask);
  ASSERT_EQ(sched_setaffinity(0, sizeof(mask), &mask), 0);
}

TEST(Placement, IntraOpThreadsKnobIsAutoOrACount) {
  EXPECT_EQ(parse_intra_op_threads("auto"), 0);
  EXPECT_EQ(parse_intra_op_threads("0"), 0);
  EXPECT_EQ(parse_intra_op_threads("3"), 3);
  for (const char* bad : {"-1", "two", "2x", " 2"})
    EXPECT_THROW(parse_intra_op_threads(bad), InvalidArgument) << bad;
}

TEST(Placement, AutoBindsOnlyWhenWorkersFit) {
  std::vector<int> cpus{0, 1};
  EXPECT_EQ(plan_placement(1, 2, cpus, BindTo::kAuto).cpus, (std::vector<int>{1}));
  EXPECT_TRUE(plan_placement(0, 1, cpus, BindTo::kAuto).cpus.empty());
  auto over = plan_placement(2, 3, cpus, BindTo::kAuto);
  EXPECT_TRUE(over.cpus.empty());
  EXPECT_EQ(over.intra_op_threads, 1);
  EXPECT_EQ(plan_placement(0, 1, cpus, BindTo::kNone, 3).intra_op_threads, 3);
  EXPECT_THROW(parse_bind_to("socket"), InvalidArgument);
}

TEST(Placement, LocalRankPicksAVisibleGpuRoundRobin) {
  EXPECT_EQ(plan_gpu(DeviceChoice::kAuto, 3, 0), -1);  // no GPU: the CPU, as before
  EXPECT_EQ(plan_gpu(DeviceChoice::kCpu, 1, 4), -1);
  EXPECT_EQ(plan_gpu(DeviceChoice::kAuto, 1, 4), 1);
  EXPECT_EQ(plan_gpu(DeviceChoice::kCuda, 5, 4), 1);  // more workers than GPUs: they share
  EXPECT_EQ(plan_gpu(DeviceChoice::kCuda, 1, 1), 0);
  EXPECT_THROW(plan_gpu(DeviceChoice::kCuda, 0, 0), InvalidArgument);
  EXPECT_EQ(parse_device("auto"), DeviceChoice::kAuto);
  EXPECT_EQ(parse_device("cuda"), DeviceChoice::kCuda);
  EXPECT_THROW(parse_device("gpu"), InvalidArgument);
}

TEST(Placement, CpuPlacementDescribesTheCpuAndNamesNoGpu) {
  Placement p;
  EXPECT_EQ(p.torch_device(), ::torch::Device(::torch::kCPU));
  EXPECT_EQ(p.describe().rfind("cpu,", 0), 0u) << p.describe();
  p.device = DeviceKind::kCuda;
  p.device_index = 1;
  p.visible_devices = 2;
  EXPECT_EQ(p.torch_device(), ::torch::Device(::torch::kCUDA, 1));
  EXPECT_NE(p.describe().find("cuda:1 (GPU 1 of the 2 visible"), std::string::npos) << p.describe();
}

TEST(Placement, CudaTensorsTakeNcclOnlyWithOneGpuPerWorkerAndAFixedWorld) {
  DeviceBackendInputs in{.knob = "auto",
                         .nccl_built = true,
                         .cuda = true,
                         .local_size = 2,
                         .visible_gpus = 2,
                         .elastic = false};
  EXPECT_EQ(choose_device_backend(in), DeviceBackend::kNccl);
  auto host_because = [&](auto change, const char* reason) {
    DeviceBackendInputs c = in;
    change(c);
    EXPECT_EQ(choose_device_backend(c), DeviceBackend::kHost) << reason;
    c.knob = "nccl";
    if (c.cuda) {
      EXPECT_THROW(choose_device_backend(c), InvalidArgument) << reason;
    }
  };
  host_because([](auto& c) { c.nccl_built = false; }, "no NCCL in this build");
  host_because([](auto& c) { c.local_size = 3; }, "3 workers share 2 GPUs");
  host_because([](auto& c) { c.elastic = true; }, "elastic");
  host_because([](auto& c) { c.cuda = false; }, "CPU workers");
  in.knob = "host";
  EXPECT_EQ(choose_device_backend(in), DeviceBackend::kHost);
  in.knob = "rdma";
  EXPECT_THROW(choose_device_backend(in), InvalidArgument);
}

TEST(Placement, IdleCpusAreMeasuredFromProcStatPerAllowedCpu) {
  // cpu0 idle 50 of 100 jiffies, cpu1 idle 100 of 100 (iowait counts as idle), cpu2 not allowed.
  auto before = detail::parse_proc_stat(
      "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\n"
      "cpu2 0 0 0 0 0 0 0 0 0 0\nintr 1 2 3\n");
  auto after = detail::parse_proc_stat(
      "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 150 0 0 150 0 0 0 0 0 0\ncpu1 0 0 0 180 20 0 0 0 0 0\n"
      "cpu2 0 0 0 100 0 0 0 0 0 0\n");
  ASSERT_EQ(before.size(), 3u);
  EXPECT_DOUBLE_EQ(detail::idle_cpus_between(before, after, {0, 1}), 1.5);
  EXPECT_DOUBLE_EQ(detail::idle_cpus_between(before, after, {0}), 0.5);
}

// Issue 16.9: a process started without `lockstep run` took 2 intra-op
// threads on 2 CPUs and ran 4x slower than with 1 when the machine was busy.
TEST(Placement, SingleProcessOnBusyCpusGetsOneThreadPerIdleCpu) {
  EXPECT_EQ(detail::threads_for_idle_cpus(1.0, 2), 1);
  EXPECT_EQ(detail::threads_for_idle_cpus(0.1, 2), 1);
  EXPECT_EQ(detail::threads_for_idle_cpus(1.9, 2), 2);
  EXPECT_EQ(detail::threads_for_idle_cpus(3.4, 8), 3);
  EXPECT_EQ(detail::threads_for_idle_cpus(9.0, 8), 8);
}

TEST(Placement, ProcessStartedWithoutTheLauncherUsesOneThreadWhenItsOtherCpuIsBusy) {
  std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  ::unsetenv("LOCKSTEP_JOB_ID");
  ::unsetenv("LOCKSTEP_INTRA_OP_THREADS");
  cpu_set_t two;
  CPU_ZERO(&two);
  CPU_SET(cpus[0], &two);
  CPU_SET(cpus[1], &two);
  ASSERT_EQ(::sched_setaffinity(0, sizeof two, &two), 0);
  pid_t spinner = ::fork();
  if (spinner == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    ::sched_setaffinity(0, sizeof one, &one);
    for (;;) asm volatile("" ::: "memory");  // spin, never optimised away
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Placement applied = place_this_worker(0, 1);
  ::kill(spinner, SIGKILL);
  ::waitpid(spinner, nullptr, 0);
  EXPECT_EQ(applied.intra_op_threads, 1) << applied.describe();
  EXPECT_EQ(placement().intra_op_threads, 1);
  EXPECT_EQ(::at::get_num_threads(), 1);
  EXPECT_NE(applied.reason.find("idle"), std::string::npos) << applied.describe();
}

// init() binds a launcher-placed worker before the engine starts (its shm
// pages are then first touched on its own node); the placement after init()
// must divide the CPUs the process had before, not the worker's own share.
TEST(Placement, BindingBeforeTheEngineLeavesTheLaterPlacementTheHostsCpus) {
  const std::vector<int> all = allowed_cpus();
  if (all.size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  const int threads = ::at::get_num_threads();
  ::setenv("LOCKSTEP_LOCAL_RANK", "1", 1);
  ::setenv("LOCKSTEP_LOCAL_SIZE", "2", 1);
  ::setenv("LOCKSTEP_BIND_TO", "core", 1);
  ::unsetenv("LOCKSTEP_INTRA_OP_THREADS");
  bind_before_engine();
  const std::vector<int> early = allowed_cpus();
  Placement later = place_this_worker(1, 2);
  const std::vector<int> after = allowed_cpus();
  for (const char* knob : {"LOCKSTEP_LOCAL_RANK", "LOCKSTEP_LOCAL_SIZE", "LOCKSTEP_BIND_TO"})
    ::unsetenv(knob);
  Placement restore;  // the process's CPUs and threads back before asserting
  restore.intra_op_threads = threads;
  restore.cpus = all;
  apply_placement(restore);
  const size_t share = all.size() / 2;
  const std::vector<int> second_half(all.begin() + share, all.begin() + 2 * share);
  EXPECT_EQ(early, second_half);
  EXPECT_EQ(later.cpus, second_half) << later.describe();
  EXPECT_EQ(after, second_half);
  EXPECT_NE(later.reason.find(fmt::format("{} CPUs / 2 worker(s)", all.size())), std::string::npos)
      << later.describe();
}

TEST(Placement, PlacementReportsWhatWasApplied) {
  ::setenv("LOCKSTEP_INTRA_OP_THREADS", "3", 1);
  Placement applied = place_this_worker(0, 1);
  ::unsetenv("LOCKSTEP_INTRA_OP_THREADS");
  EXPECT_EQ(applied.intra_op_threads, 3);
  EXPECT_EQ(placement().intra_op_threads, 3);
  EXPECT_EQ(placement().reason, "LOCKSTEP_INTRA_OP_THREADS=3");
  EXPECT_EQ(::at::get_num_threads(), 3);
}

}  // namespace
}  // namespace lockstep::torch
