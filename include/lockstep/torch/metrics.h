// Exact metric averaging for evaluation across ranks: the global value is
// sum(numerators) / sum(denominators), not the mean of per-rank ratios (which
// is wrong when ranks evaluated different numbers of samples).
//
// Tally is a value with no locking: one thread accumulates into it;
// global_value() is a collective every rank calls in the same order.
#pragma once

#include <string>
#include <vector>

namespace lockstep::torch {

// Accumulates a ratio locally (e.g. correct / seen, loss sum / samples).
class Tally {
 public:
  void add(double numerator, double denominator) {
    numerator_ += numerator;
    denominator_ += denominator;
  }
  double numerator() const { return numerator_; }
  double denominator() const { return denominator_; }
  double local_value() const { return denominator_ > 0 ? numerator_ / denominator_ : 0.0; }
  // Collective: sums numerators and denominators over all ranks (f64).
  double global_value(const std::string& name) const;

 private:
  double numerator_ = 0;
  double denominator_ = 0;
};

// Collective: element-wise sum over all ranks, in f64.
std::vector<double> sum_across_ranks(const std::vector<double>& values, const std::string& name);

}  // namespace lockstep::torch
