// Multi-process tests of lockstep::torch: every check compares against a
// reference computed without communication (the same computation on the
// concatenated batch in one process).
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/optim/state_key.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::flat_parameters;
using testing::make_mlp;
using testing::run_torch_workers;
namespace nnf = ::torch::nn::functional;

constexpr int kSteps = 4;
constexpr int64_t kBatch = 6;  // per rank

struct EquivalenceCase {
  std::string optimizer = "sgd";
  int passes = 1;
  Compression compression = Compression::kNone;
  double tolerance = 1e-5;
  double predivide = 1.0;
  Overlap overlap = Overlap::kAuto;
};

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                          ::torch::nn::Module& m) {
  if (kind == "adam")
    return std::make_unique<::torch::optim::Adam>(m.parameters(),
                                                  ::torch::optim::AdamOptions(0.01));
  return std::make_unique<::torch::optim::SGD>(m.parameters(),
                                               ::torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Step s's global batch of 2 * kBatch rows, identical on every rank.
std::pair<::torch::Tensor, ::torch::Tensor> global_batch(int step) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto x = ::torch::randn({2 * kBatch, 8}, g);
  auto y = ::torch::randn({2 * kBatch, 4}, g);
  return {x, y};
}

::torch::Tensor reference_parameters(const EquivalenceCase& c) {
  auto model = make_mlp(7);
  auto opt = make_optimizer(c.optimizer, *model);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    opt->zero_grad();
    nnf::mse_loss(model->forward(x), y).backward();
    opt->step();
  }
  return flat_parameters(*model);
}

::torch::Tensor distributed_parameters(const EquivalenceCase& c) {
  auto model = make_mlp(7);
  auto opt = make_optimizer(c.optimizer, *model);
  DistributedOptimizerOptions options;
  options.backward_passes_per_step = c.passes;
  options.compression = c.compression;
  options.gradient_predivide_factor = c.predivide;
  options.overlap = c.overlap;
  DistributedOptimizer dist(*opt, *model, options);
  if (c.overlap != Overlap::kAuto) {
    EXPECT_EQ(dist.overlaps_backward(), c.overlap == Overlap::kOn);
  }
  const int64_t chunk = kBatch / c.passes;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    dist.zero_grad();
    for (int p = 0; p < c.passes; ++p) {
      const int64_t begin = rank() * kBatch + p * chunk;
      auto loss =
          nnf::mse_loss(model->forward(x.narrow(0, begin, chunk)), y.narrow(0, begin, chunk));
      (loss / c.passes).backward();
    }
    dist.step();
  }
  return flat_parameters(*model);
}

void expect_equivalent(const EquivalenceCase& c, std::map<std::string, std::string> env = {}) {
  run_torch_workers(
      2,
      [&] {
        auto expected = reference_parameters(c);
        auto actual = distributed_parameters(c);
        const double error = (actual - expected).abs().max().item<double>();
        EXPECT_LE(error, c.tolerance) << c.optimizer << " passes=" << c.passes;
      },
      std::move(env));
}

TEST(DistributedOptimizer, SgdTwoRanksEqualsDoubleBatch) {
  expect_equivalent({.optimizer = "sgd", .overlap = Overlap::kOn});
  expect_equivalent({.optimizer = "sgd", .overlap = Overlap::kOff});
}

TEST(DistributedOptimizer, AdamTwoRanksEqualsDoubleBatch) {
  expect_equivalent({.optimizer = "adam", .overlap = Overlap::kOn});
  expect_equivalent({.optimizer = "adam", .overlap = Overlap::kOff});
}

// One rank overlapping and the other not still agree: negotiation is by name.
TEST(DistributedOptimizer, RanksMayDifferInOverlap) {
  expect_equivalent({.optimizer = "adam"}, {{"LOCKSTEP_OVERLAP", "on"}});
  run_torch_workers(2, [] {
    ::setenv("LOCKSTEP_OVERLAP", rank() == 0 ? "on" : "off", 1);
    EquivalenceCase c{.optimizer = "adam"};
    auto error = (distributed_parameters(c) - reference_parameters(c)).abs().max().item<double>();
    EXPECT_LE(error, c.tolerance);
  });
}

TEST(DistributedOptimizer, OverlapKnobIsValidated) {
  run_torch_workers(2, [] {
    ::setenv("LOCKSTEP_OVERLAP", "sometimes", 1);
    auto model = make_mlp(7);
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1));
    try {
      DistributedOptimizer dist(sgd, *model);
      ADD_FAILURE() << "LOCKSTEP_OVERLAP=sometimes was accepted";
    } catch (const lockstep::InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("LOCKSTEP_OVERLAP='sometimes'"));
    }
  });
}

TEST(DistributedOptimizer, WithoutFusion) {
  expect_equivalent({.optimizer = "adam"}, {{"LOCKSTEP_FUSION_THRESHOLD", "0"}});
}

TEST(DistributedOptimizer, GradientPredivideFactor) {
  expect_equivalent({.optimizer = "sgd", .predivide = 2.0});
}

TEST(DistributedOptimizer, BackwardPassesPerStep) {
  expect_equivalent({.optimizer = "sgd", .passes = 2, .overlap = Overlap::kOn});
  expect_equivalent({.optimizer = "adam", .passes = 2, .overlap = Overlap::kOff});
}

// Half precision on the wire: each gradient element is rounded once to 11
// (fp16) or 8 (bf16) significant bits; over 4 SGD steps with lr 0.1 the
// parameters stay within 1e-3 (fp16) and 1e-2 (bf16) of the exact run.
TEST(DistributedOptimizer, Fp16Compression) {
  expect_equivalent({.optimizer = "sgd",
                     .compression = Compression::kFp16,
                     .tolerance = 1e-3,
                     .overlap = Overlap::kOn});
  expect_equivalent({.optimizer = "sgd",
                     .compression = Compression::kFp16,
                     .tolerance = 1e-3,
                     .overlap = Overlap::kOff});
}

TEST(DistributedOptimizer, Bf16Compression) {
  expect_equivalent({.optimizer = "sgd", .compression = Compression::kBf16, .tolerance = 1e-2});
}

TEST(DistributedOptimizer, UnusedParameterContributesZeros) {
  run_torch_workers(2, [] {
    // Rank 1 never uses `b`; rank 0 does: rank 0 must not hang, and b's
    // gradient is rank 0's / 2.
    auto a = ::torch::ones({3}, ::torch::requires_grad());
    auto b = ::torch::ones({3}, ::torch::requires_grad());
    ::torch::optim::SGD sgd({a, b}, ::torch::optim::SGDOptions(1.0));
    DistributedOptimizer dist(sgd, {{"a", a}, {"b", b}});
    auto loss = rank() == 0 ? (a * 2).sum() + (b * 4).sum() : (a * 2).sum();
    loss.backward();
    dist.step();
    EXPECT_TRUE(::torch::allclose(a, ::torch::full({3}, -1.0)));
    EXPECT_TRUE(::torch::allclose(b, ::torch::full({3}, -1.0)));
  });
}

// Issue 16.7: without broadcast_parameters and with per-rank seeds, training
// ran to the end with different weights on each rank.
TEST(DistributedOptimizer, DifferentSeedsFailAtTheFirstStepNamingTheFirstDifferingParameter) {
  run_torch_workers(2, [] {
    auto model = make_mlp(100 + rank());
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model);
    auto [x, y] = global_batch(0);
    nnf::mse_loss(model->forward(x), y).backward();
    try {
      dist.step();
      ADD_FAILURE() << "no error on rank " << rank();
    } catch (const MismatchError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("parameters differ across ranks at the first "
                                                 "step: '0.weight' (the first of 4 that differs)"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("on rank 1"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("broadcast_parameters(model, 0)"));
    }
  });
}

// ElasticState's check after sync() passes its own remedy (sync() just
// broadcast the parameters, so "call broadcast_parameters" would be wrong
// there; elastic_growth_test.sh checks that message end to end).
TEST(DistributedOptimizer, FingerprintRemedyGivenReplacesTheBroadcastAdvice) {
  run_torch_workers(2, [] {
    auto model = make_mlp(100 + rank());
    DistributedOptimizer::NamedParameters named;
    for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
    try {
      check_parameters_agree(named, "after the test's sync", Group(), "keep every update equal");
      ADD_FAILURE() << "no error on rank " << rank();
    } catch (const MismatchError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("parameters differ across ranks after the "
                                                 "test's sync: '0.weight'"));
      EXPECT_THAT(e.what(), ::testing::EndsWith("keep every update equal"));
      EXPECT_THAT(e.what(), ::testing::Not(::testing::HasSubstr("broadcast_parameters")));
    }
  });
}

TEST(DistributedOptimizer, BroadcastAfterWrappingPassesEveryFingerprint) {
  run_torch_workers(2, [] {
    auto model = make_mlp(100 + rank());
    ::torch::optim::Adam adam(model->parameters(), 0.01);
    DistributedOptimizer dist(adam, *model, {.fingerprint_every = 1});
    broadcast_parameters(*model, 0);  // after the constructor, as in the README
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = global_batch(s);
      dist.zero_grad();
      nnf::mse_loss(model->forward(x.narrow(0, rank() * kBatch, kBatch)),
                    y.narrow(0, rank() * kBatch, kBatch))
          .backward();
      EXPECT_NO_THROW(dist.step()) << s;
    }
  });
}

TEST(DistributedOptimizer, DivergenceDuringTrainingIsFoundAtTheNextCheck) {
  run_torch_workers(2, [] {
    auto model = make_mlp(7);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model, {.fingerprint_every = 2});
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = global_batch(s);
      dist.zero_grad();
      nnf::mse_loss(model->forward(x), y).backward();
      if (s == 1 && rank() == 1) {
        ::torch::NoGradGuard no_grad;
        model->parameters()[1].add_(0.01);  // "0.bias" moves on rank 1 only
      }
      if (s < 2) {
        dist.step();
        continue;
      }
      try {
        dist.step();
        ADD_FAILURE() << "no error on rank " << rank();
      } catch (const MismatchError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("at step 2: '0.bias'"));
      }
    }
  });
}

// Held back from landing: the fingerprint compared over every rank, so with
// tensor parallelism (data=2 x tensor=2) the shards of different tensor ranks
// made every step fail. It compares within the optimizer's group: here the
// data groups {0,2} and {1,3}, whose members share a seed while the two
// groups differ (as two tensor shards do).
std::pair<Group, Group> data_groups_of_four() {
  Group even = Group::create({0, 2});  // collective: every rank creates both
  Group odd = Group::create({1, 3});
  return {even, odd};
}

TEST(DistributedOptimizer, FingerprintComparesOnlyTheOptimizersGroup) {
  run_torch_workers(4, [] {
    auto [even, odd] = data_groups_of_four();
    const Group& mine = rank() % 2 == 0 ? even : odd;
    auto model = make_mlp(100 + rank() % 2);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model, {.group = mine, .fingerprint_every = 1});
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = global_batch(s);
      dist.zero_grad();
      nnf::mse_loss(model->forward(x), y).backward();
      EXPECT_NO_THROW(dist.step()) << "step " << s << " on rank " << rank();
    }
    // The same parameters compared over the world do differ: the group is
    // what keeps the check above quiet.
    DistributedOptimizer::NamedParameters named;
    for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
    EXPECT_THROW(check_parameters_agree(named), MismatchError) << rank();
  });
}

TEST(DistributedOptimizer, FingerprintNamesTheGroupAndGlobalRanksOfADivergedReplica) {
  run_torch_workers(4, [] {
    auto [even, odd] = data_groups_of_four();
    const Group& mine = rank() % 2 == 0 ? even : odd;
    auto model = make_mlp(rank() == 3 ? 999 : 100 + rank() % 2);  // rank 3 forgot to broadcast
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model, {.group = mine});
    auto [x, y] = global_batch(0);
    nnf::mse_loss(model->forward(x), y).backward();
    if (rank() % 2 == 0) {
      EXPECT_NO_THROW(dist.step()) << rank();
      return;
    }
    try {
      dist.step();
      ADD_FAILURE() << "no error on rank " << rank();
    } catch (const MismatchError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("parameters differ across ranks of group {1,3} "
                                                 "at the first step: '0.weight'"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("on rank 1 but"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("on rank 3."));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("broadcast_(param, 1, name, group.id())"));
    }
  });
}

TEST(Fingerprint, IdenticalWeightsAgreeWhateverTheThreadCountAndSmallChangesDoNot) {
  auto w = ::torch::randn({1000, 300});
  at::set_num_threads(1);
  ParameterFingerprint one = fingerprint_of(w);
  at::set_num_threads(2);
  ParameterFingerprint two = fingerprint_of(w);
  EXPECT_TRUE(fingerprints_agree(one, two));
  EXPECT_FALSE(fingerprints_agree(one, fingerprint_of(w * 1.001)));
  auto moved = w.clone();
  moved[3][4] += 10.0;
  EXPECT_FALSE(fingerprints_agree(one, fingerprint_of(moved)));
  EXPECT_FALSE(fingerprints_agree(one, fingerprint_of(w.flatten().narrow(0, 0, 299999))));
  auto nan = w.clone();
  nan[0][0] = std::nan("");
  EXPECT_TRUE(fingerprints_agree(fingerprint_of(nan), fingerprint_of(nan)));
  EXPECT_FALSE(fingerprints_agree(fingerprint_of(nan), one));
}

// ---- Adasum: against its definition, evaluated with tensor ops

::torch::Tensor definition_pair(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  auto x = a.to(::torch::kDouble).flatten(), y = b.to(::torch::kDouble).flatten();
  double dot = ::torch::dot(x, y).item<double>();
  double aa = ::torch::dot(x, x).item<double>(), bb = ::torch::dot(y, y).item<double>();
  return ((1 - dot / (2 * aa)) * x + (1 - dot / (2 * bb)) * y).reshape(a.sizes());
}

// Rank r's contribution: two tensors drawn from seed r.
std::vector<::torch::Tensor> adasum_inputs(int r) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(500 + r);
  return {::torch::randn({5, 3}, g), ::torch::randn({7}, g) * (r + 1)};
}

TEST(Adasum, PairFollowsTheDefinitionAndItsLimits) {
  auto [a, b] = std::make_pair(::torch::randn({9}), ::torch::randn({9}));
  EXPECT_TRUE(::torch::allclose(adasum_pair(a, b).to(::torch::kDouble), definition_pair(a, b)));
  auto x = ::torch::tensor({1.0, 0.0}), y = ::torch::tensor({0.0, 2.0});
  EXPECT_TRUE(::torch::equal(adasum_pair(x, y), ::torch::tensor({1.0, 2.0})));  // orthogonal: sum
  EXPECT_TRUE(::torch::equal(adasum_pair(y, y), y));                            // parallel: mean
  EXPECT_TRUE(::torch::equal(adasum_pair(::torch::zeros({2}), y), y));  // below the floor: 1
}

class AdasumWorld : public ::testing::TestWithParam<int> {};

// Rank counts 2 and 4 (Horovod's recursive doubling) and 3 (not a power of
// two: the tree splits at 2).
TEST_P(AdasumWorld, EveryRankGetsThePairwiseTreeOfTheDefinition) {
  const int n = GetParam();
  std::vector<std::vector<::torch::Tensor>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(adasum_inputs(r));
  std::vector<::torch::Tensor> expected;
  for (size_t t = 0; t < 2; ++t) {
    auto level01 = definition_pair(inputs[0][t], inputs[1][t]);
    if (n == 2) expected.push_back(level01);
    if (n == 3) expected.push_back(definition_pair(level01, inputs[2][t]));
    if (n == 4)
      expected.push_back(definition_pair(level01, definition_pair(inputs[2][t], inputs[3][t])));
  }
  run_torch_workers(n, [&] {
    auto mine = adasum_inputs(rank());
    adasum_allreduce_(mine, "test.adasum");
    for (size_t t = 0; t < 2; ++t)
      EXPECT_TRUE(::torch::allclose(mine[t].to(::torch::kDouble), expected[t], 1e-6, 1e-6))
          << "rank " << rank() << " tensor " << t << "\n"
          << mine[t] << "\n"
          << expected[t];
    auto all = allgather(::torch::cat({mine[0].flatten(), mine[1]}).unsqueeze(0), "test.same");
    for (int r = 1; r < size(); ++r) EXPECT_TRUE(::torch::equal(all[0], all[r])) << r;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AdasumWorld, ::testing::Values(2, 3, 4));

// Adasum over a group: each data group {0,2} and {1,3} combines only its own
// members' tensors.
TEST(Adasum, CombinesWithinTheGivenGroupOnly) {
  std::vector<std::vector<::torch::Tensor>> inputs;
  for (int r = 0; r < 4; ++r) inputs.push_back(adasum_inputs(r));
  run_torch_workers(4, [&] {
    auto [even, odd] = data_groups_of_four();
    const Group& mine = rank() % 2 == 0 ? even : odd;
    auto tensors = adasum_inputs(rank());
    adasum_allreduce_(tensors, "test.adasum.group", mine);
    const int first = rank() % 2, second = first + 2;
    for (size_t t = 0; t < 2; ++t)
      EXPECT_TRUE(::torch::allclose(tensors[t].to(::torch::kDouble),
                                    definition_pair(inputs[first][t], inputs[second][t]), 1e-6,
                                    1e-6))
          << "rank " << rank() << " tensor " << t;
  });
}

TEST(DistributedOptimizer, AdasumStepIsSgdOnTheAdasumOfTheRanksGradients) {
  // Reference in one process: each rank's gradient on its half of the batch.
  auto [x, y] = global_batch(0);
  std::vector<std::vector<::torch::Tensor>> grads(2);
  for (int r = 0; r < 2; ++r) {
    auto model = make_mlp(7);
    nnf::mse_loss(model->forward(x.narrow(0, r * kBatch, kBatch)), y.narrow(0, r * kBatch, kBatch))
        .backward();
    for (auto& p : model->parameters()) grads[r].push_back(p.grad().clone());
  }
  auto start = make_mlp(7);
  std::vector<::torch::Tensor> expected;
  for (size_t i = 0; i < grads[0].size(); ++i)
    expected.push_back(start->parameters()[i].detach().to(::torch::kDouble) -
                       0.1 * definition_pair(grads[0][i], grads[1][i]));
  run_torch_workers(2, [&] {
    auto model = make_mlp(7);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer dist(sgd, *model, {.adasum = true});
    nnf::mse_loss(model->forward(x.narrow(0, rank() * kBatch, kBatch)),
                  y.narrow(0, rank() * kBatch, kBatch))
        .backward();
    dist.step();
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_TRUE(
          ::torch::allclose(model->parameters()[i].to(::torch::kDouble), expected[i], 1e-5, 1e-6))
          << i;
  });
  EXPECT_THROW(
      {
        auto m = make_mlp(1);
        ::torch::optim::SGD sgd(m->parameters(), 0.1);
        DistributedOptimizer bad(sgd, *m, {.adasum = true, .compression = Compression::kFp16});
      },
      InvalidArgument);
}

TEST(Broadcast, ParametersAndOptimizerStateFromRoot) {
  run_torch_workers(2, [] {
    auto model = make_mlp(100 + rank());  // different init per rank
    ::torch::optim::Adam adam(model->parameters(),
                              ::torch::optim::AdamOptions(0.01 * (rank() + 1)));
    if (rank() == 0) {  // only root has state
      auto [x, y] = global_batch(0);
      nnf::mse_loss(model->forward(x), y).backward();
      adam.step();
    }
    broadcast_parameters(*model, 0);
    broadcast_optimizer_state(adam, 0);
    auto params = flat_parameters(*model);
    auto gathered = allgather(params.unsqueeze(0), "test.params");
    EXPECT_TRUE(::torch::equal(gathered[0], gathered[1]));
    EXPECT_DOUBLE_EQ(adam.param_groups()[0].options().get_lr(), 0.01);
    ASSERT_EQ(adam.state().size(), model->parameters().size());
    auto& first = static_cast<::torch::optim::AdamParamState&>(
        *adam.state().at(lockstep::optim::state_key(model->parameters()[0])));
    auto moments = allgather(first.exp_avg().flatten().unsqueeze(0), "test.moments");
    EXPECT_TRUE(::torch::equal(moments[0], moments[1]));
    EXPECT_EQ(first.step(), 1);
  });
}

TEST(Collectives, TensorLevel) {
  run_torch_workers(2, [] {
    auto t = ::torch::full({4}, static_cast<float>(rank() + 1));
    EXPECT_TRUE(
        ::torch::equal(allreduce(t, "t.sum", {.op = ReduceOp::kSum}), ::torch::full({4}, 3.f)));
    EXPECT_TRUE(::torch::equal(allreduce(t, "t.avg"), ::torch::full({4}, 1.5f)));
    auto rows = ::torch::full({rank() + 1, 2}, static_cast<int64_t>(rank()));  // 1 row, then 2
    auto gathered = allgather(rows, "t.gather");
    EXPECT_TRUE(::torch::equal(gathered, ::torch::tensor({0, 0, 1, 1, 1, 1}).view({3, 2})));
    auto b = ::torch::arange(5, ::torch::kFloat64) * (rank() + 1);
    broadcast_(b, 1, "t.bcast");
    EXPECT_TRUE(::torch::equal(b, ::torch::arange(5, ::torch::kFloat64) * 2));
    auto send = ::torch::arange(4, ::torch::kInt32) + 10 * rank();  // rows 0,1 -> rank 0
    auto received = alltoall(send, {}, "t.a2a");
    auto expected = rank() == 0 ? ::torch::tensor({0, 1, 10, 11}, ::torch::kInt32)
                                : ::torch::tensor({2, 3, 12, 13}, ::torch::kInt32);
    EXPECT_TRUE(::torch::equal(received, expected));
    // 5 rows reduced, then split 3 + 2; row i of rank r holds (r + 1) * i.
    auto rs_in = ::torch::arange(10, ::torch::kFloat32).view({5, 2}) * (rank() + 1);
    auto reference = ::torch::arange(10, ::torch::kFloat32).view({5, 2}) * 3;
    auto mine = rank() == 0 ? reference.slice(0, 0, 3) : reference.slice(0, 3, 5);
    EXPECT_TRUE(::torch::equal(reduce_scatter(rs_in, "t.rs", {.op = ReduceOp::kSum}), mine));
    EXPECT_TRUE(::torch::allclose(reduce_scatter(rs_in, "t.rs.avg"), mine / 2));
    auto async = allreduce_async(t, "t.async", {.op = ReduceOp::kMax});
    EXPECT_TRUE(::torch::equal(async.result(), ::torch::full({4}, 2.f)));
  });
}

TEST(Collectives, CrossRankAndSizeNameTheHost) {
  run_torch_workers(2, [] {
    EXPECT_EQ(cross_size(), 1);
    EXPECT_EQ(cross_rank(), 0);
  });
}

// Group members of one dtype, one of them non-contiguous (reduced in a copy
// and written back), compared with per-tensor sums computed locally.
// Issue 30.6: k = 2 with step() after every pass was accepted silently.
TEST(DistributedOptimizer, StepBeforeTheLastAccumulatedPassWarnsOnce) {
  run_torch_workers(2, [] {
    auto model = make_mlp(7);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizerOptions options;
    options.backward_passes_per_step = 2;
    DistributedOptimizer dist(sgd, *model, options);
    auto pass = [&] { model->forward(::torch::ones({2, 8})).sum().backward(); };
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {  // the mistake: step() after every pass
      dist.zero_grad();
      pass();
      dist.step();
    }
    dist.zero_grad();
    pass();
    pass();
    dist.step();  // as meant: no warning
    const std::string said = ::testing::internal::GetCapturedStderr();
    const std::string warning = "step() after 1 backward pass(es) but backward_passes_per_step=2";
    EXPECT_NE(said.find(warning), std::string::npos) << said;
    EXPECT_EQ(said.find(warning), said.rfind(warning)) << said;
  });
}

TEST(Collectives, GroupedAllreduceInPlace) {
  run_torch_workers(2, [] {
    const float r = static_cast<float>(rank() + 1);
    std::vector<::torch::Tensor> tensors = {
        ::torch::full({3}, r), ::torch::arange(6, ::torch::kFloat32).view({2, 3}).t() * r,
        ::torch::full({1000}, 2 * r)};
    ASSERT_FALSE(tensors[1].is_contiguous());
    grouped_allreduce_async_(tensors, {"g.a", "g.b", "g.c"}, {.op = ReduceOp::kSum}).wait();
    EXPECT_TRUE(::torch::equal(tensors[0], ::torch::full({3}, 3.f)));
    EXPECT_TRUE(
        ::torch::equal(tensors[1], ::torch::arange(6, ::torch::kFloat32).view({2, 3}).t() * 3));
    EXPECT_TRUE(::torch::equal(tensors[2], ::torch::full({1000}, 6.f)));
    std::vector<::torch::Tensor> mixed = {::torch::ones({2}), ::torch::ones({2}, ::torch::kInt32)};
    try {
      grouped_allreduce_async_(mixed, {"m.f", "m.i"});
      ADD_FAILURE() << "a group of two dtypes was accepted";
    } catch (const lockstep::InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'m.i' is Int but 'm.f' is Float"));
    }
  });
}

TEST(Collectives, Objects) {
  run_torch_workers(2, [] {
    std::string text = rank() == 0 ? std::string(1000, 'x') + "root" : "other";
    EXPECT_EQ(broadcast_object(text, 0, "o.text"), std::string(1000, 'x') + "root");
    EXPECT_EQ(allgather_object(static_cast<int>(rank() * 7), "o.ints"), (std::vector<int>{0, 7}));
    auto words = allgather_object(std::string(rank() + 1, 'a' + rank()), "o.words");
    EXPECT_EQ(words, (std::vector<std::string>{"a", "bb"}));
    Tally tally;
    tally.add(rank() == 0 ? 9 : 1, rank() == 0 ? 10 : 10);
    EXPECT_DOUBLE_EQ(tally.global_value("o.tally"), 0.5);
    Tally uneven;  // 3/3 and 1/9: exact 4/12, not the mean of ratios (5/9)
    uneven.add(rank() == 0 ? 3 : 1, rank() == 0 ? 3 : 9);
    EXPECT_DOUBLE_EQ(uneven.global_value("o.uneven"), 4.0 / 12.0);
  });
}

TEST(SyncBatchNorm, MatchesBatchNormOnConcatenatedBatch) {
  run_torch_workers(2, [] {
    ::torch::manual_seed(3);
    auto x = ::torch::randn({8, 3, 5, 5}, ::torch::kFloat64) * 2 + 1;
    auto upstream = ::torch::randn({8, 3, 5, 5}, ::torch::kFloat64);
    // Reference: BatchNorm2d over all 8 samples.
    ::torch::nn::BatchNorm2d bn(3);
    bn->to(::torch::kFloat64);
    auto x_ref = x.clone().requires_grad_(true);
    auto y_ref = bn->forward(x_ref);
    (y_ref * upstream).sum().backward();
    // Sync: this rank's 4 samples.
    SyncBatchNorm sync(to_sync_batch_norm(*bn));  // copies state before the update
    sync->running_mean.zero_();
    sync->running_var.fill_(1);
    sync->to(::torch::kFloat64);
    auto mine = x.narrow(0, rank() * 4, 4).clone().requires_grad_(true);
    auto y = sync->forward(mine);
    (y * upstream.narrow(0, rank() * 4, 4)).sum().backward();
    EXPECT_TRUE(::torch::allclose(y, y_ref.narrow(0, rank() * 4, 4), 1e-9, 1e-9));
    EXPECT_TRUE(::torch::allclose(mine.grad(), x_ref.grad().narrow(0, rank() * 4, 4), 1e-9, 1e-9));
    auto weight_grad = allreduce(sync->weight.grad(), "sbn.test.wg", {.op = ReduceOp::kSum});
    auto bias_grad = allreduce(sync->bias.grad(), "sbn.test.bg", {.op = ReduceOp::kSum});
    EXPECT_TRUE(::torch::allclose(weight_grad, bn->weight.grad(), 1e-9, 1e-9));
    EXPECT_TRUE(::torch::allclose(bias_grad, bn->bias.grad(), 1e-9, 1e-9));
    EXPECT_TRUE(::torch::allclose(sync->running_mean, bn->running_mean, 1e-9, 1e-9));
    EXPECT_TRUE(::torch::allclose(sync->running_var, bn->running_var, 1e-9, 1e-9));
  });
}

}  // namespace
}  // namespace lockstep::torch
