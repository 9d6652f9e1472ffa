// GhostBatchNorm against per-chunk batch norm written out in double
// precision, and against torch's own functional batch_norm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/ghost_batch_norm.h"

namespace lockstep::optim {
namespace {

namespace F = torch::nn::functional;

constexpr double kEps = 1e-5, kMomentum = 0.1;

struct Stats {
  torch::Tensor mean, var;
};

// Per-channel batch norm of one chunk from the formulas: biased variance to
// normalise, unbiased for the running estimate.
torch::Tensor reference_chunk(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b, Stats& running) {
  std::vector<int64_t> reduce = {0};
  for (int64_t d = 2; d < x.dim(); ++d) reduce.push_back(d);
  const double n = static_cast<double>(x.numel() / x.size(1));
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = x.size(1);
  auto mean = x.sum(reduce) / n;
  auto centred = x - mean.view(shape);
  auto biased = (centred * centred).sum(reduce) / n;
  running.mean = (1 - kMomentum) * running.mean + kMomentum * mean;
  running.var = (1 - kMomentum) * running.var + kMomentum * biased * n / (n - 1);
  return centred / (biased.view(shape) + kEps).sqrt() * w.view(shape) + b.view(shape);
}

template <class Module>
void check_training_matches_chunks(Module bn, torch::Tensor x, int64_t vbs) {
  bn->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(torch::linspace(0.5, 2, bn->weight.numel(), torch::kFloat64));
    bn->bias.copy_(torch::linspace(-1, 1, bn->bias.numel(), torch::kFloat64));
  }
  Stats running{torch::zeros_like(bn->running_mean), torch::ones_like(bn->running_var)};
  std::vector<torch::Tensor> expected;
  for (int64_t i = 0; i < x.size(0); i += vbs)
    expected.push_back(reference_chunk(x.narrow(0, i, std::min(vbs, x.size(0) - i)),
                                       bn->weight.detach(), bn->bias.detach(), running));
  auto got = bn->forward(x);
  EXPECT_TRUE(torch::allclose(got, torch::cat(expected), 1e-10, 1e-10));
  EXPECT_TRUE(torch::allclose(bn->running_mean, running.mean, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(bn->running_var, running.var, 1e-12, 1e-12));
  EXPECT_EQ(bn->num_batches_tracked.template item<int64_t>(), (x.size(0) + vbs - 1) / vbs);
}

TEST(GhostBatchNorm, TrainingNormalisesEachChunkWithItsOwnStatistics) {
  torch::manual_seed(1);
  // 10 = 4 + 4 + 2: the last ghost batch is smaller.
  check_training_matches_chunks(GhostBatchNorm2d(GhostBatchNormOptions(3, 4)),
                                torch::randn({10, 3, 2, 3}, torch::kFloat64) * 3 + 1, 4);
}

TEST(GhostBatchNorm, OneDimensionalInputs) {
  torch::manual_seed(2);
  check_training_matches_chunks(GhostBatchNorm1d(GhostBatchNormOptions(5, 3)),
                                torch::randn({8, 5}, torch::kFloat64), 3);
  check_training_matches_chunks(GhostBatchNorm1d(GhostBatchNormOptions(2, 2)),
                                torch::randn({5, 2, 4}, torch::kFloat64), 2);
}

TEST(GhostBatchNorm, EqualsFunctionalBatchNormPerChunk) {
  torch::manual_seed(3);
  GhostBatchNorm2d gbn(GhostBatchNormOptions(4, 8));
  auto x = torch::randn({20, 4, 5, 5});
  auto mean = torch::zeros({4}), var = torch::ones({4});
  std::vector<torch::Tensor> expected;
  for (const auto& chunk : x.split(8))
    expected.push_back(F::batch_norm(chunk, mean, var,
                                     F::BatchNormFuncOptions().training(true).momentum(kMomentum)));
  EXPECT_TRUE(torch::allclose(gbn->forward(x), torch::cat(expected), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(gbn->running_mean, mean));
  EXPECT_TRUE(torch::allclose(gbn->running_var, var));
}

TEST(GhostBatchNorm, EvalUsesRunningStatisticsAndLeavesThemAlone) {
  torch::manual_seed(4);
  GhostBatchNorm2d gbn(GhostBatchNormOptions(3, 4));
  gbn->to(torch::kFloat64);
  for (int i = 0; i < 5; ++i) gbn->forward(torch::randn({12, 3, 2, 2}, torch::kFloat64) * 2 + 3);
  gbn->eval();
  auto mean = gbn->running_mean.clone(), var = gbn->running_var.clone();
  auto x = torch::randn({7, 3, 2, 2}, torch::kFloat64);
  auto got = gbn->forward(x);
  auto expected = (x - mean.view({1, 3, 1, 1})) / (var.view({1, 3, 1, 1}) + kEps).sqrt();
  EXPECT_TRUE(torch::allclose(got, expected, 1e-12, 1e-12));
  EXPECT_TRUE(torch::equal(gbn->running_mean, mean));
  EXPECT_TRUE(torch::equal(gbn->running_var, var));
  // Five batches of three chunks moved the mean most of the way to 3.
  EXPECT_GT(mean.min().item<double>(), 1.5);
}

TEST(GhostBatchNorm, DropInForBatchNorm2d) {
  torch::manual_seed(5);
  GhostBatchNorm2d gbn(GhostBatchNormOptions(3, 64));  // one ghost batch: plain BN
  torch::nn::BatchNorm2d bn(3);
  std::vector<std::string> gbn_names, bn_names;
  for (const auto& item : gbn->named_parameters()) gbn_names.push_back(item.key());
  for (const auto& item : gbn->named_buffers()) gbn_names.push_back(item.key());
  for (const auto& item : bn->named_parameters()) bn_names.push_back(item.key());
  for (const auto& item : bn->named_buffers()) bn_names.push_back(item.key());
  EXPECT_EQ(gbn_names, bn_names);
  auto x = torch::randn({16, 3, 4, 4}, torch::requires_grad());
  auto a = gbn->forward(x), b = bn->forward(x);
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5));
  a.pow(2).sum().backward();
  EXPECT_TRUE(gbn->weight.grad().defined());
  torch::nn::Sequential seq(torch::nn::Conv2d(1, 3, 3),
                            GhostBatchNorm2d(GhostBatchNormOptions(3, 2)));
  EXPECT_EQ(seq->forward(torch::randn({4, 1, 5, 5})).sizes(), (std::vector<int64_t>{4, 3, 3, 3}));
  auto copy = std::dynamic_pointer_cast<GhostBatchNorm2dImpl>(gbn->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->running_var, gbn->running_var));
}

TEST(GhostBatchNorm, RejectsBadShapesAndOptions) {
  GhostBatchNorm2d gbn(GhostBatchNormOptions(3, 4));
  EXPECT_THROW(gbn->forward(torch::randn({4, 3})), InvalidArgument);
  EXPECT_THROW(gbn->forward(torch::randn({4, 2, 2, 2})), InvalidArgument);
  EXPECT_THROW(GhostBatchNorm2d(GhostBatchNormOptions(3, 0)), InvalidArgument);
  GhostBatchNorm1d plain(GhostBatchNormOptions(2, 2).affine(false));
  EXPECT_FALSE(plain->weight.defined());
  EXPECT_EQ(plain->forward(torch::randn({6, 2})).size(0), 6);
  EXPECT_THROW(plain->forward(torch::randn({5, 2})), InvalidArgument);  // 2 + 2 + 1
  plain->eval();
  EXPECT_EQ(plain->forward(torch::randn({1, 2})).size(0), 1);  // eval needs no batch statistics
}

}  // namespace
}  // namespace lockstep::optim
