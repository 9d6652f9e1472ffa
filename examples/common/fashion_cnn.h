// The small CNN shared by the Fashion-MNIST main job and the large-batch
// study: (conv3x3 - BN - ReLU - maxpool2) x 2, then one linear layer.
// 28x28x1 -> 14x14xC1 -> 7x7xC2 -> 10 logits.
#pragma once

#include <torch/torch.h>

namespace lockstep::examples {

struct FashionCnnOptions {
  int64_t channels1 = 16;
  int64_t channels2 = 32;
};

class FashionCnnImpl : public torch::nn::Module {
 public:
  explicit FashionCnnImpl(FashionCnnOptions options = {})
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(
                                                1, options.channels1, 3).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(options.channels1))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(
                                                options.channels1, options.channels2, 3)
                                                .padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(options.channels2))),
        fc(register_module("fc", torch::nn::Linear(options.channels2 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1->forward(conv1->forward(x))), 2);
    x = torch::max_pool2d(torch::relu(bn2->forward(conv2->forward(x))), 2);
    return fc->forward(x.flatten(1));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Linear fc;
};
TORCH_MODULE(FashionCnn);

}  // namespace lockstep::examples
