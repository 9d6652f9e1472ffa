// The link between two neighbouring pipeline stages (Note [Pipeline
// transfers] in pipeline.cc): activations travel from the earlier stage to
// the later, gradients back, over their two-rank process set.
//
// Owned by one Pipeline; not thread-safe.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "lockstep/torch/collectives.h"
#include "lockstep/torch/group.h"

namespace lockstep::parallel {

class PipelineLink {
 public:
  // `pair`: the two stages, the earlier one first (lower global rank).
  PipelineLink(lockstep::torch::Group pair, std::string prefix);
  ~PipelineLink();

  // Earlier stage: micro-batch `i` of `rows` rows; returns at once.
  void send_activation(int i, int64_t rows, const ::torch::Tensor& activation);
  // Later stage: blocks; adds the time blocked to *waited.
  ::torch::Tensor receive_activation(int i, int64_t rows, double* waited);
  // Later stage: the gradient of micro-batch i's input; returns at once.
  void send_gradient(int i, const ::torch::Tensor& gradient);
  // Earlier stage: the gradient for `activation` (same shape and dtype).
  ::torch::Tensor receive_gradient(int i, const ::torch::Tensor& activation, double* waited);
  // Waits for every send still in flight (their buffers are released).
  void finish_sends();

 private:
  struct Meta {
    ::torch::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  const Meta& agree(int64_t rows, const ::torch::Tensor* activation);
  void send(const ::torch::Tensor& t, const std::string& name);
  ::torch::Tensor receive(::torch::Tensor buffer, const std::string& name, double* waited);

  lockstep::torch::Group pair_;
  std::string prefix_;
  int me_;  // 0: the earlier stage
  std::map<int64_t, Meta> agreed_;
  std::vector<lockstep::torch::TensorHandle> sends_;
};

}  // namespace lockstep::parallel
