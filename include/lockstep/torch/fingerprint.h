// Parameter fingerprints: catch ranks whose weights silently differ.
//
// Data-parallel training assumes every rank holds the same parameters. When
// they differ (no broadcast_parameters() after per-rank seeds, a rank that
// loaded another checkpoint, an update applied on one rank only) training
// runs to the end with a different model per rank and averaged metrics hide
// it. A fingerprint is, per parameter, (element count, sum, L2 norm) in
// double; comparing them across ranks costs two reductions over the weights
// and an allgather of 24 bytes per parameter.
//
// Sums depend on the summation order, which LibTorch lets depend on the
// thread count, so values (accumulated in double) are compared with a
// relative tolerance (kFingerprintTolerance) rather than bitwise: identical
// weights always agree; weights that differ by more than ~1e-6 of their norm
// (different initial weights: by far more) are reported. It is a
// fingerprint, not a proof: a change that keeps both sum and norm is missed.
//
// DistributedOptimizer checks at its first step() and then every
// LOCKSTEP_FINGERPRINT_EVERY steps (DistributedOptimizerOptions::
// fingerprint_every); call check_parameters_agree() yourself after anything
// that should leave ranks identical (loading a checkpoint, a manual update).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/group.h"

namespace lockstep::torch {

inline constexpr double kFingerprintTolerance = 1e-6;

struct ParameterFingerprint {
  int64_t numel = 0;
  double sum = 0;
  double norm = 0;
};

// Pure: the fingerprint of one tensor (any floating dtype; others as double).
ParameterFingerprint fingerprint_of(const ::torch::Tensor& tensor);
// Pure: whether two fingerprints describe the same weights (see above).
bool fingerprints_agree(const ParameterFingerprint& a, const ParameterFingerprint& b);

// Collective over the ranks of `group` (default: all; the others must not
// call it): gathers each member's fingerprints of `named` and throws
// MismatchError on every member when they differ, naming the first differing
// parameter (in `named` order), the global ranks and their values, and what
// to call. `what` names the check in the message (e.g. "at step 200").
// Every member must pass the same parameters in the same order; with tensor
// or pipeline parallelism pass the data-parallel group, whose ranks hold
// replicas (DistributedOptimizer passes its own group).
void check_parameters_agree(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                            const std::string& what = "", const Group& group = {});
// The same, with `remedy` (what to do about a difference) in place of the
// advice to broadcast the parameters: for a check right after the ranks were
// made equal (ElasticState's first commit after sync()), where a difference
// comes from an update that differed across ranks and a broadcast would hide it.
void check_parameters_agree(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                            const std::string& what, const Group& group, const std::string& remedy);

}  // namespace lockstep::torch
