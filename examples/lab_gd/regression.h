// The lab's problem: fit y = w·x + b to noisy samples of a line by
// minimising the mean squared error, with full-batch gradient descent,
// stochastic gradient descent (one sample per step) or mini-batches.
// Value types and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lockstep::examples::lab {

struct Data {
  std::vector<double> x, y;
};

struct Params {
  double w = 0, b = 0;
};

// n samples: x ~ N(0, 1), y = w·x + b + N(0, noise²).
Data make_data(int64_t n, Params truth, double noise, uint64_t seed);

// Mean squared error over all of `data`.
double loss(const Data& data, Params p);

// The least-squares solution from the normal equations (the reference the
// iterative methods approach).
Params closed_form(const Data& data);

// One descent step on samples [order[begin], order[end]) of `data`.
Params step(const Data& data, const std::vector<int64_t>& order, int64_t begin, int64_t end,
            Params p, double lr);

}  // namespace lockstep::examples::lab
