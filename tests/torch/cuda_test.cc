// lockstep::torch on CUDA tensors (built only with LOCKSTEP_WITH_CUDA; label
// gpu). Every result is compared with a reference computed on the CPU
// without communication. The parent process never touches CUDA: workers are
// forked, and a CUDA context does not survive a fork, so the parent only
// checks that a driver is there.
#include <gmock/gmock.h>
#include <unistd.h>

#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::run_torch_workers;

bool driver_present() { return access("/dev/nvidiactl", F_OK) == 0; }

#define LOCKSTEP_NEED_GPU() \
  if (!driver_present()) GTEST_SKIP() << "no NVIDIA driver on this machine"

// Rank r's input: a CPU tensor known to every rank.
::torch::Tensor input_of(int r, std::vector<int64_t> shape, uint64_t seed) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(seed * 100 + r);
  return ::torch::randn(shape, g);
}

void expect_close(const ::torch::Tensor& got, const ::torch::Tensor& want, double tol = 1e-6) {
  ASSERT_TRUE(got.is_cuda()) << "result is on " << got.device().str();
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(::torch::allclose(got.cpu(), want, tol, tol))
      << "max |diff| " << (got.cpu() - want).abs().max().item<double>();
}

// Every collective on CUDA tensors at `size` ranks, whichever way they
// travel; the references are computed on the CPU from all ranks' inputs.
void collective_matrix(int size) {
  const int r = rank();
  const ::torch::Device gpu = placement().torch_device();
  ASSERT_TRUE(gpu.is_cuda());
  std::vector<::torch::Tensor> all;
  for (int k = 0; k < size; ++k) all.push_back(input_of(k, {6, 5}, 1));
  const ::torch::Tensor sum = ::torch::stack(all).sum(0);

  auto x = all[r].to(gpu);
  allreduce_(x, "sum", {.op = ReduceOp::kSum});
  expect_close(x, sum, 1e-5);
  expect_close(allreduce(all[r].to(gpu), "avg", {.op = ReduceOp::kAverage}), sum / size, 1e-5);
  expect_close(allreduce(all[r].to(gpu), "scaled",
                         {.op = ReduceOp::kSum, .prescale = 0.5, .postscale = 3.0}),
               sum * 1.5, 1e-5);
  expect_close(allreduce(all[r].to(gpu), "max", {.op = ReduceOp::kMax}),
               std::get<0>(::torch::stack(all).max(0)));

  // Several tensors at once: the engine fuses them into one buffer.
  std::vector<::torch::Tensor> group = {all[r].to(gpu), all[r].narrow(0, 0, 2).to(gpu) * 2};
  grouped_allreduce_async_(group, {"g.a", "g.b"}, {.op = ReduceOp::kSum}).wait();
  expect_close(group[0], sum, 1e-5);
  expect_close(group[1], sum.narrow(0, 0, 2) * 2, 1e-5);

  expect_close(broadcast(all[r].to(gpu), size - 1, "bcast"), all[size - 1]);
  expect_close(allgather(all[r].to(gpu), "gather"), ::torch::cat(all));
  auto scattered = reduce_scatter(all[r].to(gpu), "rs", {.op = ReduceOp::kSum});
  const int64_t rows = 6 / size + (r < 6 % size ? 1 : 0);
  int64_t before = 0;
  for (int k = 0; k < r; ++k) before += 6 / size + (k < 6 % size ? 1 : 0);
  expect_close(scattered, sum.narrow(0, before, rows), 1e-5);
  std::vector<int64_t> splits(size, 0);
  splits[0] = 6;  // every rank sends all rows to rank 0
  auto got = alltoall(all[r].to(gpu), splits, "a2a");
  if (r == 0)
    expect_close(got, ::torch::cat(all));
  else
    EXPECT_EQ(got.size(0), 0);
}

// testing::make_mlp seeds through torch::manual_seed, which in LibTorch 2.x
// also seeds (and so starts) CUDA: in this parent that would break every
// forked worker. These weights come from a CPU generator of their own.
::torch::nn::Sequential seeded_mlp() {
  ::torch::nn::Sequential m(::torch::nn::Linear(8, 16), ::torch::nn::Tanh(),
                            ::torch::nn::Linear(16, 4));
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(3);
  ::torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.copy_(::torch::randn(p.sizes(), g) * 0.3);
  return m;
}

TEST(CudaPlacement, WorkerComputesOnItsGpu) {
  LOCKSTEP_NEED_GPU();
  run_torch_workers(1,
                    [] {
                      const Placement p = placement();
                      EXPECT_EQ(p.device, DeviceKind::kCuda);
                      EXPECT_EQ(p.device_index, 0);
                      EXPECT_GE(p.visible_devices, 1);
                      EXPECT_THAT(p.describe(), ::testing::HasSubstr("cuda:0"));
                      EXPECT_TRUE(p.torch_device().is_cuda());
                    },
                    {{"LOCKSTEP_DEVICE", "cuda"}});
}

// Two workers sharing one GPU: their CUDA tensors are staged through pinned
// host memory over shared memory (NCCL refuses two ranks on one GPU).
TEST(CudaCollectives, TwoWorkersSharingAGpuStageThroughTheHost) {
  LOCKSTEP_NEED_GPU();
  run_torch_workers(2,
                    [] {
                      EXPECT_FALSE(engine::global().has_device_communicator());
                      collective_matrix(2);
                    },
                    {{"LOCKSTEP_DEVICE", "cuda"}});
}

// One worker with the NCCL device path forced: every collective runs on the
// GPU through the engine's device executor (fusion buffer, scaled sums).
TEST(CudaCollectives, DevicePathOverNcclAtOneRank) {
  LOCKSTEP_NEED_GPU();
  run_torch_workers(1,
                    [] {
                      ASSERT_TRUE(engine::global().has_device_communicator());
                      collective_matrix(1);
                    },
                    {{"LOCKSTEP_DEVICE", "cuda"}, {"LOCKSTEP_DEVICE_BACKEND", "nccl"}});
}

// DistributedOptimizer on CUDA parameters over 2 workers sharing the GPU
// ends where one CPU process training on the concatenated batch ends.
TEST(CudaTraining, DistributedOptimizerMatchesTheCpuReference) {
  LOCKSTEP_NEED_GPU();
  auto batch = [](int step) {
    auto g = ::torch::make_generator<at::CPUGeneratorImpl>(500 + step);
    return std::pair{::torch::randn({8, 8}, g), ::torch::randn({8, 4}, g)};
  };
  // The reference too runs in the workers: a backward() here would start
  // LibTorch's CUDA device threads in the parent, and CUDA does not survive
  // a fork.
  run_torch_workers(
      2,
      [&] {
        auto model = seeded_mlp();
        ::torch::optim::SGD ref_opt(model->parameters(),
                                    ::torch::optim::SGDOptions(0.1).momentum(0.9));
        for (int s = 0; s < 4; ++s) {
          auto [x, y] = batch(s);
          ref_opt.zero_grad();
          ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
          ref_opt.step();
        }
        const ::torch::Tensor want = testing::flat_parameters(*model);
        const ::torch::Device gpu = placement().torch_device();
        auto m = seeded_mlp();
        m->to(gpu);
        ::torch::optim::SGD opt(m->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
        DistributedOptimizer dist(opt, *m);
        for (int s = 0; s < 4; ++s) {
          auto [x, y] = batch(s);
          auto xs = x.narrow(0, rank() * 4, 4).to(gpu), ys = y.narrow(0, rank() * 4, 4).to(gpu);
          dist.zero_grad();
          ::torch::nn::functional::mse_loss(m->forward(xs), ys).backward();
          dist.step();
        }
        const ::torch::Tensor got = testing::flat_parameters(*m);
        ASSERT_TRUE(got.is_cuda());
        EXPECT_TRUE(::torch::allclose(got.cpu(), want, 1e-5, 1e-5))
            << "max |diff| " << (got.cpu() - want).abs().max().item<double>();
      },
      {{"LOCKSTEP_DEVICE", "cuda"}});
}

TEST(CudaMixedPrecision, AutocastGuardCastsOnTheWorkersGpu) {
  LOCKSTEP_NEED_GPU();
  run_torch_workers(1,
                    [] {
                      ::torch::nn::Linear linear(8, 4);
                      linear->to(placement().torch_device());
                      auto x = ::torch::randn(
                          {2, 8}, ::torch::TensorOptions().device(placement().torch_device()));
                      {
                        AutocastGuard bf16(Precision::kBf16);
                        EXPECT_EQ(linear->forward(x).scalar_type(), ::torch::kBFloat16);
                      }
                      {
                        AutocastGuard fp16(Precision::kFp16);
                        EXPECT_EQ(linear->forward(x).scalar_type(), ::torch::kFloat16);
                      }
                      EXPECT_EQ(linear->forward(x).scalar_type(), ::torch::kFloat32);  // restored
                    },
                    {{"LOCKSTEP_DEVICE", "cuda"}});
}

}  // namespace
}  // namespace lockstep::torch
