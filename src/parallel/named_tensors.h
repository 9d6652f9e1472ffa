// Pieces of the layout-independent model checkpoints
// (src/parallel/model_checkpoint.cc, Note [Whole-model view]).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/optimizer_state.h"

namespace lockstep::parallel::detail {

// A module that is nothing but tensors under dotted names ("3.fc1.weight"
// becomes child "3", child "fc1", parameter "weight"), so Module::save and
// Module::load see the nesting a single-process model has. Owns its children;
// not thread-safe.
class NamedTensors : public ::torch::nn::Module {
 public:
  void add(const std::string& name, const ::torch::Tensor& tensor, bool buffer);
  // The tensor registered as `name`; lockstep::Error when there is none.
  ::torch::Tensor get(const std::string& name) const;

 private:
  std::map<std::string, std::shared_ptr<NamedTensors>> subtrees_;
};

// The ShardSpec of each of `parameters` (by name) that belongs to a
// ShardedModule inside `module`; matched by tensor identity, so the names
// may be the whole model's while `module` is one stage.
std::map<std::string, ShardSpec> shards_by_name(
    const ::torch::nn::Module& module,
    const std::vector<std::pair<std::string, ::torch::Tensor>>& parameters);

// How the checkpoint calls that take a module ask it for its layout (the
// one call of issue 43): this rank's ModelParts when it holds
// tensor-parallel layers (PartialState), nullopt when every rank holds it
// whole; InvalidArgument naming `call`, `path` and the owner's call for a
// module its owner lays out (a Pipeline's stage: PartialStateMark).
std::optional<ModelParts> sliced_parts(const ::torch::nn::Module& module, const char* call,
                                       const std::string& path);

using StateMap =
    ska::flat_hash_map<OptimizerStateKey, std::unique_ptr<::torch::optim::OptimizerParamState>>;

// Copies this rank's slice of every whole tensor in `whole` into `parts`,
// and makes `optimizer`'s state the slices of `whole_state` (keyed by the
// whole tensors). Throws lockstep::Error naming a shape that does not fit.
void take_slices(const NamedTensors& whole, const ModelParts& parts, const StateMap& whole_state,
                 ::torch::optim::Optimizer& optimizer);

// ---- what each rank holds (model_parts_describe.cc)

// One parameter or buffer as one rank holds it.
struct Piece {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t dim = 0, begin = 0, length = -1;  // length -1: the whole tensor
  int64_t group = -1;                       // optimizer param group; -1: none
  int64_t stage = 0, position = 0, rank = 0;
  int64_t dtype = static_cast<int64_t>(::torch::kFloat);  // c10::ScalarType
  ::torch::Tensor value{};                                // Describe::kValues only
  std::string state{};  // kValues only: serialize_state(), empty when none
  std::string slots{};  // kSlots only: the state's description, empty when none
};

struct Description {
  int64_t groups = 0;
  std::vector<Piece> params{}, buffers{};
};

// kShapes: names, shapes, slices and groups; kValues: also the values and
// the serialized optimizer state (a gather of everything); kSlots: also the
// optimizer state's keys, kinds, dtypes and shapes (bytes, no tensors).
enum class Describe { kShapes, kValues, kSlots };
// Every rank's description, all-gathered over the job (collective).
// Throws lockstep::Error when the ranks' optimizers have other group counts.
std::vector<Description> describe_all(const ModelParts& parts,
                                      const ::torch::optim::Optimizer& optimizer, Describe what);

// One whole parameter (or buffer) and the slices that hold it, deduplicated:
// each slice is described by the lowest (stage, position, rank) holding it.
struct Whole {
  std::string name;
  std::vector<int64_t> shape;
  int64_t group = -1, dim = 0, dtype = 0;
  std::vector<const Piece*> slices{};  // by begin
};
// Single-process order (Note [Whole-model view]); throws lockstep::Error
// when the ranks disagree on a tensor or its slices do not cover it.
std::vector<Whole> whole_list(const std::vector<Description>& all, bool buffers);
inline bool is_sliced(const Whole& w) { return w.slices.front()->length >= 0; }

}  // namespace lockstep::parallel::detail
