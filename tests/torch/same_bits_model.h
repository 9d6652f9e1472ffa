// The model and data of the same-bits tests (same_bits_test.cc, and
// same_bits_worker.cc for the MPI, Gloo and elastic runs): a small CNN with
// BatchNorm2d, BatchNorm1d and Dropout, and a data order that is a function
// of the global position only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace lockstep::torch::testing {

inline constexpr int64_t kSameBitsSamples = 256, kSameBitsGlobalBatch = 32,
                         kSameBitsMicroBatches = 8, kSameBitsSteps = 24;

struct SameBitsNet : ::torch::nn::Module {
  ::torch::nn::Sequential body{::torch::nn::Conv2d(::torch::nn::Conv2dOptions(1, 4, 3).padding(1)),
                               ::torch::nn::BatchNorm2d(4),
                               ::torch::nn::ReLU(),
                               ::torch::nn::MaxPool2d(2),
                               ::torch::nn::Flatten(),
                               ::torch::nn::Linear(64, 16),
                               ::torch::nn::BatchNorm1d(16),
                               ::torch::nn::ReLU(),
                               ::torch::nn::Dropout(0.25),
                               ::torch::nn::Linear(16, 4)};
  SameBitsNet() { register_module("body", body); }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return body->forward(x); }
};

struct SameBitsData {
  ::torch::Tensor x, y;
  SameBitsData() {
    auto gen = at::detail::createCPUGenerator(7);
    x = ::torch::randn({kSameBitsSamples, 1, 8, 8}, gen);
    auto teacher = ::torch::randn({64, 4}, gen);
    y = ::torch::matmul(x.flatten(1), teacher).argmax(1);
  }
  // The samples at global positions [first, first + count) of `step`'s
  // batch: one order per epoch, the same for every world size.
  std::pair<::torch::Tensor, ::torch::Tensor> batch(int64_t step, int64_t first,
                                                    int64_t count) const {
    const int64_t per_epoch = kSameBitsSamples / kSameBitsGlobalBatch;
    auto gen = at::detail::createCPUGenerator(100 + static_cast<uint64_t>(step / per_epoch));
    auto order = ::torch::randperm(kSameBitsSamples, gen, ::torch::kLong);
    auto idx = order.narrow(0, (step % per_epoch) * kSameBitsGlobalBatch + first, count);
    return {x.index_select(0, idx), y.index_select(0, idx)};
  }
};

}  // namespace lockstep::torch::testing
