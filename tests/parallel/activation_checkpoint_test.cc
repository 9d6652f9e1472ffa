// Activation checkpointing against the same model without it: gradients
// bit for bit (f32, f64, bf16 autocast, with dropout), the random stream
// after backward, activation bytes measured at the allocator (lower), the
// wrapper's names and train/eval; at 2 ranks, DistributedOptimizer steps
// (overlapped allreduce) bitwise equal, and a 2-stage pipeline of
// checkpointed segments against the single-process model.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/activation_checkpoint.h"
#include "lockstep/parallel/pipeline.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/memory.h"
#include "lockstep/torch/mixed_precision.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using ::torch::Tensor;
namespace nn = ::torch::nn;
namespace lt = lockstep::torch;

constexpr int64_t kWidth = 128;
constexpr int64_t kBatch = 64;

// `pairs` x (Linear, GELU) then Linear to 3 classes, optionally with dropout
// after each GELU. GELU keeps its input for backward, so every pair holds two
// activations when not checkpointed.
nn::Sequential make_model(int pairs, double dropout, ::torch::Dtype dtype) {
  ::torch::manual_seed(11);
  nn::Sequential model;
  for (int i = 0; i < pairs; ++i) {
    model->push_back(nn::Linear(kWidth, kWidth));
    model->push_back(nn::GELU());
    if (dropout > 0) model->push_back(nn::Dropout(dropout));
  }
  model->push_back(nn::Linear(kWidth, 3));
  model->to(dtype);
  return model;
}

std::pair<Tensor, Tensor> make_batch(::torch::Dtype dtype) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(3);
  return {::torch::randn({kBatch, kWidth}, g).to(dtype), ::torch::randint(0, 3, {kBatch}, g)};
}

struct Outcome {
  std::vector<Tensor> grads;  // parameters in order, then the input's
  Tensor after;               // the next random numbers after backward
};

// One forward and backward with the global generator seeded; `model` is the
// plain or the checkpointed layout of the same layers.
Outcome run(nn::Sequential model, ::torch::Dtype dtype,
            lt::Precision precision = lt::Precision::kFp32,
            ::torch::Device device = ::torch::kCPU) {
  auto [cpu_x, cpu_y] = make_batch(dtype);
  model->to(device);
  Tensor x = cpu_x.to(device).requires_grad_(true), y = cpu_y.to(device);
  ::torch::manual_seed(5);  // every generator, CUDA's too
  Tensor loss;
  {
    lt::AutocastGuard autocast(precision);
    loss = ::torch::nn::functional::cross_entropy(model->forward(x).to(dtype), y);
  }
  loss.backward();
  Outcome r;
  for (auto& p : model->parameters()) r.grads.push_back(p.grad().cpu());
  r.grads.push_back(x.grad().cpu());
  r.after = ::torch::rand({4}, ::torch::TensorOptions().device(device)).cpu();
  return r;
}

void expect_bitwise(const Outcome& plain, const Outcome& ckpt, const std::string& what) {
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size()) << what;
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(::torch::equal(plain.grads[i], ckpt.grads[i]))
        << what << ": gradient " << i << " differs by "
        << (plain.grads[i] - ckpt.grads[i]).abs().max().item<double>();
  EXPECT_TRUE(::torch::equal(plain.after, ckpt.after)) << what << ": random stream moved";
}

TEST(ActivationCheckpoint, GradientsBitwiseEqualInF32AndF64) {
  for (auto dtype : {::torch::kFloat32, ::torch::kFloat64})
    for (int segment : {1, 2, 3, 100}) {
      const Outcome plain = run(make_model(3, 0, dtype), dtype);
      const Outcome ckpt = run(checkpoint_layers(make_model(3, 0, dtype), segment), dtype);
      expect_bitwise(plain, ckpt, fmt::format("{} segment {}", c10::toString(dtype), segment));
    }
}

TEST(ActivationCheckpoint, DropoutMasksAreReplayed) {
  const Outcome plain = run(make_model(3, 0.5, ::torch::kFloat32), ::torch::kFloat32);
  const Outcome ckpt =
      run(checkpoint_layers(make_model(3, 0.5, ::torch::kFloat32), 3), ::torch::kFloat32);
  expect_bitwise(plain, ckpt, "dropout 0.5");
  // The check has teeth: another seed draws other masks, other gradients.
  auto model = make_model(3, 0.5, ::torch::kFloat32);
  auto [x, y] = make_batch(::torch::kFloat32);
  ::torch::manual_seed(6);
  ::torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  EXPECT_FALSE(::torch::equal(model->parameters()[0].grad(), plain.grads[0]));
}

TEST(ActivationCheckpoint, Bf16AutocastGradientsBitwiseEqual) {
  const Outcome plain =
      run(make_model(3, 0.25, ::torch::kFloat32), ::torch::kFloat32, lt::Precision::kBf16);
  const Outcome ckpt = run(checkpoint_layers(make_model(3, 0.25, ::torch::kFloat32), 2),
                           ::torch::kFloat32, lt::Precision::kBf16);
  expect_bitwise(plain, ckpt, "bf16 autocast");
  // Autocast really ran (bf16 compute gives other gradients than fp32).
  const Outcome fp32 = run(make_model(3, 0.25, ::torch::kFloat32), ::torch::kFloat32);
  EXPECT_FALSE(::torch::equal(plain.grads[0], fp32.grads[0]));
}

struct Memory {
  int64_t held_after_forward = 0;  // activations kept for backward (and the loss)
  int64_t peak = 0;                // forward and backward
};

Memory measure(nn::Sequential model) {
  auto [x, y] = make_batch(::torch::kFloat32);
  for (auto& p : model->parameters()) p.mutable_grad() = ::torch::zeros_like(p);  // not counted
  lt::AllocationTracker tracker;
  Tensor loss = ::torch::nn::functional::cross_entropy(model->forward(x), y);
  Memory m{tracker.current_bytes(), 0};
  loss.backward();
  m.peak = tracker.peak_bytes();
  EXPECT_GT(tracker.allocations(), 0) << "the allocator reported nothing";
  return m;
}

TEST(ActivationCheckpoint, HoldsOnlySegmentInputsAndPeaksLower) {
  constexpr int kPairs = 8;
  constexpr int64_t kActivation = kBatch * kWidth * 4;  // one f32 layer output
  const Memory plain = measure(make_model(kPairs, 0, ::torch::kFloat32));
  const Memory ckpt = measure(checkpoint_layers(make_model(kPairs, 0, ::torch::kFloat32), 4));
  // Plain: each pair keeps the Linear's output (GELU's input) and GELU's
  // output: 2 per pair, then the logits. Checkpointed (2 pairs per segment,
  // the last Linear alone: 5 segments): each segment's output only, and the
  // CPU generator's state per segment (for dropout).
  const int64_t logits = kBatch * 3 * 4;
  const int64_t rng = at::detail::getDefaultCPUGenerator().get_state().nbytes();
  const int64_t loss = 64;  // the loss and what cross_entropy keeps besides the logits
  EXPECT_GE(plain.held_after_forward, 2 * kPairs * kActivation + logits);
  EXPECT_LE(plain.held_after_forward, 2 * kPairs * kActivation + 2 * logits + loss);
  EXPECT_GE(ckpt.held_after_forward, 4 * kActivation + logits + 5 * rng);
  EXPECT_LE(ckpt.held_after_forward, 4 * kActivation + 2 * logits + 5 * rng + loss);
  EXPECT_LT(ckpt.peak, plain.peak);
  std::printf(
      "activation bytes (one layer output: %lld): held after forward %lld plain, %lld "
      "checkpointed; peak %lld plain, %lld checkpointed\n",
      static_cast<long long>(kActivation), static_cast<long long>(plain.held_after_forward),
      static_cast<long long>(ckpt.held_after_forward), static_cast<long long>(plain.peak),
      static_cast<long long>(ckpt.peak));
}

TEST(ActivationCheckpoint, WrapperKeepsNamesAndReachesTrainEval) {
  auto plain = make_model(2, 0.5, ::torch::kFloat32);
  auto wrapped = checkpoint_layers(plain, 1);
  std::vector<std::string> a, b;
  for (const auto& p : plain->named_parameters()) a.push_back(p.key());
  for (const auto& p : wrapped->named_parameters()) b.push_back(p.key());
  EXPECT_EQ(a, b);  // segment 1: the plain model's names
  auto dropout = Checkpointed(nn::Dropout(0.5));
  dropout->eval();
  auto x = ::torch::ones({8}, ::torch::requires_grad());
  EXPECT_TRUE(::torch::equal(dropout->forward(x), x));  // eval reached the wrapped dropout
  EXPECT_THROW(checkpoint_layers(plain, 0), InvalidArgument);
  EXPECT_THROW(checkpoint(SegmentForward(), x, {}), InvalidArgument);
}

// CUDA builds only (skipped elsewhere): the replay restores the CUDA
// generator, and the tracker sees the CUDA caching allocator.
TEST(ActivationCheckpoint, CudaDropoutMasksAreReplayed) {
  if (!::torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const ::torch::Device cuda(::torch::kCUDA, 0);
  const Outcome plain =
      run(make_model(3, 0.5, ::torch::kFloat32), ::torch::kFloat32, lt::Precision::kFp32, cuda);
  const Outcome ckpt = run(checkpoint_layers(make_model(3, 0.5, ::torch::kFloat32), 3),
                           ::torch::kFloat32, lt::Precision::kFp32, cuda);
  expect_bitwise(plain, ckpt, "CUDA dropout 0.5");
  lt::AllocationTracker tracker;
  Tensor t = ::torch::ones({1024}, ::torch::TensorOptions().device(cuda));
  EXPECT_GT(tracker.allocations(), 0);
  EXPECT_GE(tracker.current_bytes(), 4096);
}

TEST(ActivationCheckpoint, NoGradModeJustRunsForward) {
  auto model = make_model(2, 0, ::torch::kFloat32);
  auto ckpt = checkpoint_layers(make_model(2, 0, ::torch::kFloat32), 2);
  auto [x, y] = make_batch(::torch::kFloat32);
  ::torch::NoGradGuard no_grad;
  auto out = ckpt->forward(x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(::torch::equal(out, model->forward(x)));
}

// Two SGD steps of DistributedOptimizer with gradients allreduced from
// backward's hooks (overlap on): the checkpointed model's gradients reach
// the hooks as the plain model's do, so the parameters agree bit for bit.
void expect_data_parallel_steps_bitwise_equal() {
  std::vector<Tensor> result[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    auto model = make_model(2, 0.25, ::torch::kFloat32);
    if (checkpointed) model = checkpoint_layers(model, 3);
    ::torch::optim::SGD sgd(model->parameters(), 0.1);
    lt::DistributedOptimizer dist(
        sgd, *model,
        {.name_prefix = fmt::format("dp{}", checkpointed), .overlap = lt::Overlap::kOn});
    auto [x, y] = make_batch(::torch::kFloat32);
    ::torch::manual_seed(31 + lt::rank());
    for (int step = 0; step < 2; ++step) {
      dist.zero_grad();
      ::torch::nn::functional::cross_entropy(model->forward(x), y).backward();
      dist.step();
    }
    for (auto& p : model->parameters()) result[checkpointed].push_back(p.detach().clone());
  }
  for (size_t i = 0; i < result[0].size(); ++i)
    EXPECT_TRUE(::torch::equal(result[0][i], result[1][i])) << "parameter " << i;
}

// "1.3.weight" (segment 1, layer 3) -> "3.weight": the plain model's name.
std::string plain_name(const std::string& name) { return name.substr(name.find('.') + 1); }

TEST(ActivationCheckpoint, PipelineOfCheckpointedSegmentsMatchesOneProcess) {
  std::map<std::string, Tensor> reference;
  {
    auto model = make_model(3, 0, ::torch::kFloat32);
    auto [x, y] = make_batch(::torch::kFloat32);
    ::torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    for (const auto& p : model->named_parameters()) reference[p.key()] = p.value().grad().clone();
  }
  lt::testing::run_torch_workers(2, [&] {
    expect_data_parallel_steps_bitwise_equal();
    for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
      Pipeline pipe(checkpoint_layers(make_model(3, 0, ::torch::kFloat32), 2),
                    {.micro_batches = 4,
                     .schedule = schedule,
                     .name = fmt::format("ckpt{}", static_cast<int>(schedule))});
      auto [x, y] = make_batch(::torch::kFloat32);
      pipe.train_step(x, y, [](const Tensor& out, const Tensor& target) {
        return ::torch::nn::functional::cross_entropy(out, target);
      });
      for (const auto& [name, param] : pipe.named_parameters()) {
        ASSERT_TRUE(param.grad().defined()) << name;
        EXPECT_TRUE(::torch::allclose(param.grad(), reference.at(plain_name(name)), 1e-5, 1e-6))
            << name << " on stage " << pipe.stage();
      }
    }
  });
}

}  // namespace
}  // namespace lockstep::parallel
