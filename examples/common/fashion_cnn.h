// The small CNN shared by the Fashion-MNIST main job and the large-batch
// study: (conv3x3 - BN - ReLU - maxpool2) x 2, then one linear layer.
// 28x28x1 -> 14x14xC1 -> 7x7xC2 -> 10 logits.
//
// The normalisation layers come from FashionCnnOptions::make_norm (default:
// ::torch::nn::BatchNorm2d) so a distributed job can build the same model with
// lockstep::torch::SyncBatchNorm without this header depending on lockstep.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace lockstep::examples {

struct FashionCnnOptions {
  int64_t channels1 = 16;
  int64_t channels2 = 32;
  // channels -> a module with Tensor forward(Tensor); empty: BatchNorm2d.
  std::function<::torch::nn::AnyModule(int64_t channels)> make_norm;
};

class FashionCnnImpl : public ::torch::nn::Module {
 public:
  explicit FashionCnnImpl(FashionCnnOptions options = {})
      : conv1(register_module("conv1", ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(
                                                1, options.channels1, 3).padding(1).bias(false)))),
        bn1(make_norm(options, options.channels1)),
        conv2(register_module("conv2", ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(
                                                options.channels1, options.channels2, 3)
                                                .padding(1).bias(false)))),
        bn2(make_norm(options, options.channels2)),
        fc(register_module("fc", ::torch::nn::Linear(options.channels2 * 7 * 7, 10))) {
    register_module("bn1", bn1.ptr());
    register_module("bn2", bn2.ptr());
  }

  ::torch::Tensor forward(::torch::Tensor x) {
    x = ::torch::max_pool2d(::torch::relu(bn1.forward(conv1->forward(x))), 2);
    x = ::torch::max_pool2d(::torch::relu(bn2.forward(conv2->forward(x))), 2);
    return fc->forward(x.flatten(1));
  }

  ::torch::nn::Conv2d conv1;
  ::torch::nn::AnyModule bn1;
  ::torch::nn::Conv2d conv2;
  ::torch::nn::AnyModule bn2;
  ::torch::nn::Linear fc;

 private:
  static ::torch::nn::AnyModule make_norm(const FashionCnnOptions& options, int64_t channels) {
    if (options.make_norm) return options.make_norm(channels);
    return ::torch::nn::AnyModule(::torch::nn::BatchNorm2d(channels));
  }
};
TORCH_MODULE(FashionCnn);

}  // namespace lockstep::examples
