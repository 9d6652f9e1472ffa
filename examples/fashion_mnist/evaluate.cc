#include "fashion_mnist/evaluate.h"

#include "lockstep/torch/torch.h"

namespace lockstep::examples {

namespace lt = lockstep::torch;

double evaluate(::torch::nn::Module& model,
                const std::function<::torch::Tensor(const ::torch::Tensor&)>& forward,
                const FashionSplit& test, int64_t batch_size) {
  ::torch::NoGradGuard no_grad;
  model.eval();
  const int64_t n = test.size(), r = lt::rank(), s = lt::size();
  const int64_t begin = n * r / s, end = n * (r + 1) / s;
  lt::Tally accuracy;
  for (int64_t i = begin; i < end; i += batch_size) {
    const int64_t len = std::min(batch_size, end - i);
    auto logits = forward(test.images.narrow(0, i, len));
    auto correct = logits.argmax(1).eq(test.labels.narrow(0, i, len)).sum().item<double>();
    accuracy.add(correct, static_cast<double>(len));
  }
  model.train();
  return accuracy.global_value("eval.accuracy");
}

}  // namespace lockstep::examples
