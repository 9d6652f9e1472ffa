// A LibTorch program outside the lockstep tree, built against the installed
// package on a C++17 default: it instantiates lockstep/torch/objects.h's
// concept-constrained overloads (issue 16.5) and runs a collective.
#include <cstdio>

#include <lockstep/torch/torch.h>

int main() {
  lockstep::torch::init();
  int answer = lockstep::torch::broadcast_object(42, 0, "consumer.answer");
  auto sum = lockstep::torch::allreduce(torch::ones({3}), "consumer.ones",
                                        {.op = lockstep::torch::ReduceOp::kSum});
  int size = lockstep::torch::size();
  lockstep::torch::shutdown();
  std::printf("size=%d answer=%d sum=%g\n", size, answer, sum.sum().item<double>());
  return answer == 42 && sum.sum().item<double>() == 3.0 * size ? 0 : 1;
}
