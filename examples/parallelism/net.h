// The lockstep-parallelism model: the Fashion-MNIST CNN with a wide MLP head,
// as a ::torch::nn::Sequential so a pipeline can cut it anywhere. The head's
// four linear layers are sized so that every strategy has something to
// split: two stages balance at ~55/45 % of the parameters, and the tensor-
// parallel version shards all four (Column, Row, Column, Row).
//
//   conv3x3(1->16) relu pool  conv3x3(16->32) relu pool  flatten
//   fc1 1568->384 relu  fc2 384->384 relu  fc3 384->1536 relu  fc4 1536->10
#pragma once

#include <torch/torch.h>

#include "lockstep/parallel/tensor_parallel.h"

namespace lockstep::examples {

struct NetShape {
  int64_t c1 = 16, c2 = 32, h1 = 384, h2 = 384, h3 = 1536;
  int64_t flat() const { return c2 * 7 * 7; }
};

namespace detail {
inline void add_features(::torch::nn::Sequential& net, const NetShape& s) {
  namespace nn = ::torch::nn;
  net->push_back("conv1", nn::Conv2d(nn::Conv2dOptions(1, s.c1, 3).padding(1)));
  net->push_back("relu1", nn::ReLU());
  net->push_back("pool1", nn::MaxPool2d(2));
  net->push_back("conv2", nn::Conv2d(nn::Conv2dOptions(s.c1, s.c2, 3).padding(1)));
  net->push_back("relu2", nn::ReLU());
  net->push_back("pool2", nn::MaxPool2d(2));
  net->push_back("flatten", nn::Flatten());
}
}  // namespace detail

// Every rank builds it from the same seed: the same initial weights.
inline ::torch::nn::Sequential make_dense_net(const NetShape& s = {}) {
  namespace nn = ::torch::nn;
  ::torch::nn::Sequential net;
  detail::add_features(net, s);
  net->push_back("fc1", nn::Linear(s.flat(), s.h1));
  net->push_back("relu3", nn::ReLU());
  net->push_back("fc2", nn::Linear(s.h1, s.h2));
  net->push_back("relu4", nn::ReLU());
  net->push_back("fc3", nn::Linear(s.h2, s.h3));
  net->push_back("relu5", nn::ReLU());
  net->push_back("fc4", nn::Linear(s.h3, 10));
  return net;
}

// The same network with the head sharded over `group`: from the same seed,
// its shards are slices of make_dense_net's matrices.
inline ::torch::nn::Sequential make_tensor_net(const lockstep::torch::Group& group,
                                               const NetShape& s = {}) {
  namespace nn = ::torch::nn;
  namespace lp = lockstep::parallel;
  auto column = [&](int64_t in, int64_t out, const char* name) {
    lp::ColumnParallelLinearOptions o(in, out);
    o.group = group;
    o.name = name;
    return lp::ColumnParallelLinear(o);
  };
  auto row = [&](int64_t in, int64_t out, const char* name) {
    lp::RowParallelLinearOptions o(in, out);
    o.group = group;
    o.name = name;
    return lp::RowParallelLinear(o);
  };
  ::torch::nn::Sequential net;
  detail::add_features(net, s);
  net->push_back("fc1", column(s.flat(), s.h1, "tp.fc1"));
  net->push_back("relu3", nn::ReLU());
  net->push_back("fc2", row(s.h1, s.h2, "tp.fc2"));
  net->push_back("relu4", nn::ReLU());
  net->push_back("fc3", column(s.h2, s.h3, "tp.fc3"));
  net->push_back("relu5", nn::ReLU());
  net->push_back("fc4", row(s.h3, 10, "tp.fc4"));
  return net;
}

}  // namespace lockstep::examples
