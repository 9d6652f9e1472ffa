// The routed save of a tensor- or pipeline-parallel model's checkpoint
// directory: no rank assembles the whole model.
//
// Note [Routed saves of model parts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The ranks all-gather descriptions of what they hold (names, whole shapes,
// slices, param groups, and the optimizer state's keys, kinds, dtypes and
// shapes: bytes, no tensors; parallel/named_tensors.h), so every rank builds
// the manifest a single process's save of the whole model writes (Note
// [Whole-model view] in model_checkpoint.cc: the same names, order, groups
// and state) and the same assignment of tensors to writers. Then every slice
// goes straight to its tensor's writer in one all-to-all (deliver(), Note
// [Routed checkpoint saves]): a slice along dim d of a whole tensor of shape
// S is prod(S[:d]) contiguous runs of the flattened whole, one record each;
// elementwise optimizer state (the shape of the slice) travels like its
// parameter, any other value (a step count) from the tensor's first slice.
// Each slice is sent by the lowest (stage, position, rank) that holds it, so
// data-parallel replicas and tensor-parallel copies send nothing. A rank
// holds its own tensors, one send buffer of the slices it sends and the
// entries it writes: never the whole model.
#include <c10/util/Type.h>
#include <fmt/format.h>

#include <map>
#include <typeinfo>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel::detail::ckdir {
namespace {

namespace lt = lockstep::torch;
using ::torch::Tensor;

// The records of one slice of entry `e` (of whole shape `shape`): `local`
// holds elements [begin, +length) along `slice.dim` (length < 0: all).
void add_slice_records(std::vector<Record>& out, const Manifest& m, size_t e, const Piece& slice,
                       const Tensor& local) {
  const Entry& entry = m.tensors[e];
  const Tensor flat = local.detach().to(::torch::kCPU).contiguous().reshape({-1});
  if (slice.length < 0) {
    out.push_back({entry.rank, e, 0, flat});
    return;
  }
  const auto& shape = entry.shape;
  LOCKSTEP_DCHECK(slice.dim >= 0 && slice.dim < static_cast<int64_t>(shape.size()),
                  "routed parts save: slice dim {} of {}", slice.dim, entry.name);
  const SliceRuns runs = slice_runs(shape, slice.dim, slice.begin, slice.length);
  if (flat.numel() != runs.count * runs.run)
    throw Error(
        fmt::format("checkpoint directory save: rank {}'s slice of {} holds {} elements, "
                    "not the {} its shard [{}, +{}) along dim {} of {} has",
                    lt::rank(), entry.name, flat.numel(), runs.count * runs.run, slice.begin,
                    slice.length, slice.dim, c10::str(c10::IntArrayRef(shape))));
  if (runs.run == 0) return;
  for (int64_t o = 0; o < runs.count; ++o)
    out.push_back({entry.rank, e, runs.at(o), flat.narrow(0, o * runs.run, runs.run)});
}

// Where each tensor of the manifest comes from.
struct PartsPlan {
  std::vector<size_t> param_entry, buffer_entry;  // by whole index
  struct Slot {
    size_t entry = 0;
    bool sliced = false;  // elementwise state of a sliced parameter: travels like its slices
  };
  std::map<std::pair<size_t, std::string>, Slot> slots;  // (whole parameter, key)
};

// The whole model's entries in take_snapshot()'s order: parameters, buffers,
// then each param group's state.
PartsPlan plan_parts(Manifest& m, const std::vector<Whole>& params,
                     const std::vector<Whole>& buffers,
                     const ::torch::optim::Optimizer& optimizer) {
  PartsPlan plan;
  for (const Whole& w : params)
    plan.param_entry.push_back(
        add_entry(m, w.name, Part::kModel, static_cast<::torch::ScalarType>(w.dtype), w.shape));
  for (const Whole& w : buffers)
    plan.buffer_entry.push_back(
        add_entry(m, w.name, Part::kModel, static_cast<::torch::ScalarType>(w.dtype), w.shape));
  std::vector<std::vector<SlotInfo>> slots(params.size());  // from each tensor's first slice
  for (size_t i = 0; i < params.size(); ++i) {
    const Whole& w = params[i];
    const Piece* first = w.slices.front();
    slots[i] = parse_slots(first->slots);
    for (const Piece* s : w.slices)
      if (s->slots.empty() != first->slots.empty())
        throw Error(
            fmt::format("checkpoint directory save: '{}' has optimizer state on rank {} "
                        "and none on rank {} (step every stage's optimizer the same number "
                        "of times)",
                        w.name, (first->slots.empty() ? s : first)->rank,
                        (first->slots.empty() ? first : s)->rank));
  }
  OptimizerInfo& info = m.optimizer;
  info.type = c10::demangle(typeid(optimizer).name());
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& options = optimizer.param_groups()[g].options();
    ParamGroupInfo group{.params = {}, .lr = options.get_lr(), .options = options_hex(options)};
    for (size_t i = 0; i < params.size(); ++i) {
      const Whole& w = params[i];
      if (w.group != static_cast<int64_t>(g)) continue;
      group.params.push_back(w.name);
      for (const SlotInfo& slot : slots[i]) {
        info.state[w.name].push_back({slot.key, slot.kind});
        const bool sliced = slot.elementwise && is_sliced(w);
        plan.slots[{i, slot.key}] = {
            add_entry(m, w.name + "." + slot.key, Part::kOptimizer,
                      static_cast<::torch::ScalarType>(slot.dtype), sliced ? w.shape : slot.shape),
            sliced};
      }
    }
    info.groups.push_back(std::move(group));
  }
  return plan;
}

// This rank's records: the slices it is the first holder of.
std::vector<Record> parts_records(const Manifest& m, const PartsPlan& plan,
                                  const std::vector<Whole>& params,
                                  const std::vector<Whole>& buffers, const ModelParts& parts,
                                  const ::torch::optim::Optimizer& optimizer) {
  const int me = lt::rank();
  std::vector<Record> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const Whole& w = params[i];
    for (const Piece* slice : w.slices) {
      if (slice->rank != me) continue;
      const auto& [name, local] = parts.parameters.at(static_cast<size_t>(slice->position));
      LOCKSTEP_DCHECK(name == w.name, "routed parts save: position {} is {}, not {}",
                      slice->position, name, w.name);
      add_slice_records(out, m, plan.param_entry[i], *slice, local);
      auto state = optimizer.state().find(state_key(local));
      if (state == optimizer.state().end()) continue;
      for (const auto& [key, value] : state_values(*state->second)) {
        auto slot = plan.slots.find({i, key});
        if (slot == plan.slots.end()) continue;
        const auto& [e, sliced] = slot->second;
        const Tensor t = state_value_tensor(value, w.name + "." + key).first;
        if (sliced)
          add_slice_records(out, m, e, *slice, t);
        else if (slice == w.slices.front())  // a step count or scalar: from the first slice
          out.push_back(
              {m.tensors[e].rank, e, 0, t.detach().to(::torch::kCPU).contiguous().reshape({-1})});
      }
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Piece* first = buffers[i].slices.front();
    if (first->rank != me) continue;
    const Tensor& local = parts.buffers.at(static_cast<size_t>(first->position)).second;
    const size_t e = plan.buffer_entry[i];
    out.push_back(
        {m.tensors[e].rank, e, 0, local.detach().to(::torch::kCPU).contiguous().reshape({-1})});
  }
  return out;
}

}  // namespace

Snapshot take_parts_snapshot(const ModelParts& parts, const ::torch::optim::Optimizer& optimizer,
                             const lt::TrainingProgress& progress, bool own_copies) {
  const auto all = describe_all(parts, optimizer, Describe::kSlots);
  const auto params = whole_list(all, false), buffers = whole_list(all, true);
  Snapshot s;
  s.manifest.progress = progress;
  s.manifest.world_size = lt::size();
  const PartsPlan plan = plan_parts(s.manifest, params, buffers, optimizer);
  assign_ranks(s.manifest.tensors, s.manifest.world_size);
  s.values.assign(s.manifest.tensors.size(), Tensor());
  std::vector<Record> records;
  try {
    records = parts_records(s.manifest, plan, params, buffers, parts, optimizer);
  } catch (
      const std::exception& e) {  // ours alone: we still send (nothing), so no rank waits on us
    s.failure = e.what();
    s.failure_is_cause = true;
  }
  const std::vector<uint64_t> covered = deliver(s, records, lt::Group(), "model_parts", own_copies);
  for (size_t e = 0; e < s.values.size() && s.failure.empty(); ++e) {
    const Entry& entry = s.manifest.tensors[e];
    if (entry.rank != lt::rank()) continue;
    if (!s.values[e].defined() && entry.bytes == 0)  // an empty tensor: no record carries it
      s.values[e] = ::torch::empty(entry.shape, ::torch::TensorOptions().dtype(entry.dtype));
    if (!s.values[e].defined() || covered[e] != entry.bytes)
      s.failure = fmt::format(
          "checkpoint directory save: {} arrived with {} of its {} bytes from "
          "the ranks that hold its slices; every rank must step the same "
          "optimizer over the same model",
          entry.name, covered[e], entry.bytes);
  }
  return s;
}

}  // namespace lockstep::parallel::detail::ckdir
