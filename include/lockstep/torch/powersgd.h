// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, NeurIPS
// 2019; PyTorch's powerSGD_hook): each gradient matrix M (n x m: the first
// dimension by the rest) travels as two thin factors, P = M Q (n x r) and
// Q = M^T P (m x r), instead of n x m values:
//
//   M += error                  error feedback: what earlier steps dropped
//   P  = allreduce_mean(M Q)    Q: last step's (warm start), same on every rank
//   P  = orthonormal columns of P (Gram-Schmidt)
//   Q  = allreduce_mean(M^T P)
//   M' = P Q^T                  the group's average, rank r; written to the gradient
//   error = M - M'              kept on this rank for the next step
//
// So a step sends (n + m) r values per matrix instead of n m (the factor
// n m / ((n + m) r), e.g. 128x for a 1024 x 1024 weight at r = 4), in two
// allreduces one after the other. Vectors (biases, norms) and matrices
// whose factors would not be at least min_compression_rate times smaller
// are allreduced whole, in the first of the two. The first warmup_steps
// steps allreduce everything whole (PyTorch's start_powerSGD_iter): early
// gradients change fast and the warm-started Q needs a few steps to settle.
//
// Used through DistributedOptimizer (Compression::kPowerSGD, options.powersgd),
// which calls reduce() at synchronize(): the allreduces do not overlap
// backward. Every rank of the group must call reduce() with the same names
// and shapes, in the same order. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lockstep/torch/gradient_reducer.h"
#include "lockstep/torch/group.h"

namespace lockstep::torch {

struct PowerSGDOptions {
  int rank = 1;                       // r: columns of the factors P and Q
  int64_t warmup_steps = 0;           // steps of whole allreduce before compressing
  bool warm_start = true;             // reuse last step's Q (else a fresh random one)
  double min_compression_rate = 2.0;  // compress only where n m >= this x (n + m) r
  uint64_t seed = 0;                  // of the random first Q (the same on every rank)
};
// Throws InvalidArgument naming the bad field (rank < 1, warmup_steps < 0,
// min_compression_rate < 1).
void validate(const PowerSGDOptions& options);

// Values one tensor of this shape sends per compressed step: (n + m) r when
// it is compressed, its numel() otherwise (the same rule reduce() follows).
int64_t powersgd_wire_elements(at::IntArrayRef shape, const PowerSGDOptions& options);

class PowerSGD : public GradientReducer {
 public:
  // `group`: the ranks whose gradients are combined; `name_prefix` names the
  // collectives (<prefix>.<name>.p / .q / .whole).
  PowerSGD(PowerSGDOptions options, Group group, std::string name_prefix);
  PowerSGD(const PowerSGD&) = delete;
  PowerSGD& operator=(const PowerSGD&) = delete;

  // Replaces each of `grads` (in place) by the group's mean (sum when
  // !average), low-rank for the compressed ones. Collective over the group.
  void reduce(const std::vector<::torch::Tensor>& grads, const std::vector<std::string>& names,
              bool average) override;
  int64_t steps() const { return steps_; }
  const PowerSGDOptions& options() const { return options_; }

  struct State {
    ::torch::Tensor q;      // m x r, the same on every rank
    ::torch::Tensor error;  // n x m, this rank's
  };

 private:
  bool compressed(const ::torch::Tensor& grad) const;
  void allreduce_whole(const std::vector<::torch::Tensor>& grads,
                       const std::vector<std::string>& names, bool average);

  PowerSGDOptions options_;
  Group group_;
  std::string prefix_;
  int64_t steps_ = 0;
  std::map<std::string, State> state_;
};

// Columns of `p` (n x r) made orthonormal in place, in order (classical
// Gram-Schmidt; a zero column stays zero rather than dividing by zero).
void orthonormalize_columns_(::torch::Tensor& p);

}  // namespace lockstep::torch
