// Optimizer state of parameters split into pieces across ranks (ZeRO's and
// FSDP's shards) <-> the state of whole parameters, the form checkpoints keep
// (lockstep/parallel/checkpoint.h). Shared by ShardedOptimizer
// (sharded_state.cc) and FullyShardedModel (fully_sharded_state.cc).
//
// A piece's state tensors that are elementwise (1-D, one value per element of
// the piece) are concatenated in parameter order and reshaped to the
// parameter; everything else (step counts, scalars) is taken from the first
// piece. With whole_tensors each piece is a whole parameter already.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace lockstep::parallel::detail {

using ParamState = ::torch::optim::OptimizerParamState;
using FullState = std::vector<std::unique_ptr<ParamState>>;

// Elements [offset, +length) of parameter `param` (flattened), stepped by the
// optimizer as `tensor` (its state is keyed by it).
struct PieceRef {
  int param = 0;
  int64_t offset = 0;
  int64_t length = 0;
  ::torch::Tensor tensor;
};

// Every parameter's whole state assembled from all ranks' pieces
// (collective over `process_set`, `ranks` of them; complete on every rank
// that holds some state; null where no rank has state for a parameter).
FullState gather_piece_states(const ::torch::optim::Optimizer& optimizer,
                              const std::vector<PieceRef>& pieces,
                              const std::vector<::torch::Tensor>& params, bool whole_tensors,
                              const std::string& name, int process_set, int ranks);

// Sets optimizer's state of each piece to its slice of full[piece.param]
// (erased where that is null). Throws InvalidArgument when full has another
// parameter count.
void scatter_piece_states(::torch::optim::Optimizer& optimizer, const std::vector<PieceRef>& pieces,
                          const std::vector<::torch::Tensor>& params, bool whole_tensors,
                          const FullState& full, const std::string& who);

}  // namespace lockstep::parallel::detail
