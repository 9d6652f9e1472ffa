// Adasum: Horovod's adaptive summation (hvd.Adasum; Maleki et al., "Scaling
// Distributed Training with Adaptive Summation", MLSys 2021).
//
// Two gradients a and b combine as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 when its vector's squared norm is below
// sqrt(DBL_MIN) ~ 1.5e-154, as in Horovod: only a zero or underflowed norm
// is guarded): parallel gradients are averaged, orthogonal ones added, so the
// learning rate of one worker stays right as workers are added. Ranks combine
// pairwise in a binary tree over rank order: with 4 ranks
// adasum(adasum(g0, g1), adasum(g2, g3)), Horovod's recursive doubling. A
// world that is not a power of two splits at the largest power of two below
// it (3 ranks: adasum(adasum(g0, g1), g2)); Horovod refuses such worlds.
// Each tensor is combined on its own (Horovod: per layer).
//
// How: one allgather of the flattened tensors, then every rank evaluates the
// tree in double precision with sequential loops, so all ranks get bitwise
// the same result whatever their thread counts. The allgather moves (N-1)x
// the tensor bytes to each rank where an allreduce moves 2(N-1)/N: equal
// for 2 ranks, 2x for 4, 4x for 8. Horovod's vector-halving distance-doubling
// implementation, which moves as little as an allreduce, is not done.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "lockstep/torch/group.h"

namespace lockstep::torch {

// Pure: adasum(a, b) of two vectors (double precision, sequential), the
// building block; a and b must have the same number of elements.
::torch::Tensor adasum_pair(const ::torch::Tensor& a, const ::torch::Tensor& b);

// Collective over `group` (default: all ranks; the tree runs over group
// ranks): replaces every tensor with the Adasum of the members' values of it.
// All members pass tensors of the same shapes, dtypes and order; floating
// dtypes only (InvalidArgument otherwise). `name` names the collective.
void adasum_allreduce_(std::vector<::torch::Tensor>& tensors, const std::string& name,
                       const Group& group = {});

}  // namespace lockstep::torch
