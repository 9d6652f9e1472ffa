// Pieces of collectives.cc that collectives_autograd.cc builds on.
#pragma once

#include <torch/torch.h>

#include <string>

namespace lockstep::torch::detail {

// Root's tensor copied into a new one on every rank, outside autograd.
::torch::Tensor broadcast_copy(const ::torch::Tensor& tensor, int root, std::string name,
                               int process_set);

// This process's index in `process_set` and the set's member count. The
// world's are rank() and size(); another set's come from an allgather of
// global ranks under `name` (collective over the set; lockstep numbers a
// set's members in ascending global-rank order).
struct SetPlace {
  int rank;
  int size;
};
SetPlace place_in_set(int process_set, const std::string& name);

}  // namespace lockstep::torch::detail
