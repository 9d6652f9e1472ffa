// The routed save of a checkpoint directory for strategies that split
// parameters or optimizer state across ranks: no rank assembles the model.
//
// Note [Routed checkpoint saves]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The files are the same as a data-parallel save of the same model writes
// (whole tensors under state_dict names, Note [Checkpoint directory layout],
// assigned to ranks by bytes), so any world size and strategy reads them.
// What differs is how each tensor reaches the rank that writes it:
//  1. the ranks of a shard group exchange a description of the optimizer
//     state they hold (keys, kinds, dtypes; bytes, not tensors), so every
//     rank builds the same manifest and the same rank assignment;
//  2. every rank cuts its pieces (FSDP's parameter segments, ZeRO's and
//     FSDP's optimizer-state segments) into records addressed to the rank
//     that writes the tensor, and one all-to-all within the shard group
//     delivers them; values held whole everywhere (buffers, ZeRO's
//     parameters) are taken by their writer locally.
// Each byte crosses the network once, and a rank holds its own pieces plus
// the tensors it writes: never the whole model or optimizer state, which the
// full view (FullyShardedModel::with_full_view) gathers onto every rank.
// HSDP's replicas are whole models each: a writer's own shard group feeds it.
#include <c10/util/Type.h>
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <sstream>
#include <typeinfo>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/checkpoint_dir_impl.h"

namespace lockstep::parallel::detail::ckdir {
namespace lt = lockstep::torch;
using ::torch::Tensor;
namespace {

bool is_elementwise(const Tensor& t, const PieceRef& piece, const ShardedView& view) {
  if (!t.defined() || t.numel() != piece.length) return false;
  return view.whole_tensors ? t.sizes().equals(view.shapes[piece.param]) : t.dim() == 1;
}

// The value of a state entry as a CPU, contiguous tensor and its kind.
std::pair<Tensor, std::string> slot_tensor(const c10::IValue& v, const std::string& where) {
  auto [t, kind] = state_value_tensor(v, where);
  return {t.detach().to(::torch::kCPU).contiguous(), kind};
}

// This rank's pieces' state, by parameter index: what step 1 exchanges.
std::map<int, std::vector<SlotInfo>> local_slots(const ShardedView& view,
                                                 const ::torch::optim::Optimizer& optimizer) {
  std::map<int, std::vector<SlotInfo>> out;
  for (const PieceRef& piece : view.pieces) {
    auto it = optimizer.state().find(state_key(piece.tensor));
    if (it == optimizer.state().end() || out.count(piece.param)) continue;
    auto& slots = out[piece.param];
    for (const auto& [key, value] : state_values(*it->second)) {
      if (value.isTensor() && !value.toTensor().defined()) continue;
      auto [t, kind] = slot_tensor(value, key);
      const bool element = kind == "tensor" && is_elementwise(value.toTensor(), piece, view);
      slots.push_back({key, kind, static_cast<int>(t.scalar_type()), element,
                       element ? view.shapes[piece.param] : t.sizes().vec()});
    }
  }
  return out;
}

std::string encode_slots(const std::map<int, std::vector<SlotInfo>>& slots) {
  std::ostringstream out;
  for (const auto& [param, list] : slots)
    for (const SlotInfo& s : list) {
      out << param << ' ';
      write_slot(out, s);
      out << '\n';
    }
  return out.str();
}

void decode_slots(const std::string& text, std::map<int, std::vector<SlotInfo>>& into) {
  std::istringstream in(text);
  std::map<int, std::vector<SlotInfo>> mine;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int param = 0;
    fields >> param;
    mine[param].push_back(read_slot(fields));
  }
  for (auto& [param, list] : mine) into.emplace(param, std::move(list));  // the first rank's wins
}

// Keys and kinds every rank agrees on: each parameter's description from the
// lowest shard-group rank that holds state for it.
std::map<int, std::vector<SlotInfo>> agreed_slots(const ShardedView& view,
                                                  const ::torch::optim::Optimizer& optimizer) {
  auto mine = local_slots(view, optimizer);
  if (view.group.size() == 1) return mine;
  std::map<int, std::vector<SlotInfo>> all;
  for (const std::string& text :
       lt::allgather_bytes(encode_slots(mine), view.name + ".ckdir.state", view.group.id()))
    decode_slots(text, all);
  return all;
}

std::map<OptimizerStateKey, std::string> module_names(const ::torch::nn::Module& module) {
  std::map<OptimizerStateKey, std::string> out;
  for (const auto& item : module.named_parameters())
    out.emplace(state_key(item.value()), item.key());
  return out;
}

// The manifest's tensors (model entries in the module's order, buffers, then
// optimizer state by group), with `source` saying where each value comes
// from: a parameter index (routed pieces), a state slot, or a whole tensor.
struct Plan {
  std::vector<Tensor> whole;  // per entry: a value held whole here, or undefined
  std::map<int, std::vector<size_t>> param_entry;  // parameter -> its model entries (tied: several)
  std::map<std::pair<int, std::string>, size_t> slot_entry;  // (parameter, key) -> entry
};

Plan plan_entries(Snapshot& s, const ShardedView& view, const ::torch::optim::Optimizer& optimizer,
                  const std::map<int, std::vector<SlotInfo>>& slots) {
  Plan plan;
  const auto names = module_names(*view.module);  // a tied parameter: its first name
  std::map<OptimizerStateKey, int> index;
  std::vector<std::string> param_names(view.params.size());
  for (size_t p = 0; p < view.params.size(); ++p) {
    auto it = names.find(state_key(view.params[p]));
    if (it == names.end())
      throw InvalidArgument("checkpoint directory: a sharded parameter is not one of the module's");
    param_names[p] = it->second;
    index.emplace(it->first, static_cast<int>(p));
  }
  for (const auto& item : view.module->named_parameters()) {
    auto it = index.find(state_key(item.value()));
    if (it == index.end())
      throw InvalidArgument(
          fmt::format("checkpoint directory: parameter {} of the module is not "
                      "held by the sharded strategy",
                      item.key()));
    plan.param_entry[it->second].push_back(s.manifest.tensors.size());
    add_entry(s.manifest, item.key(), Part::kModel, view.dtype, view.shapes[it->second]);
    plan.whole.push_back(view.whole_params ? item.value() : Tensor());
  }
  for (const auto& item : view.module->named_buffers()) {
    add_entry(s.manifest, item.key(), Part::kModel, item.value().scalar_type(),
              item.value().sizes().vec());
    plan.whole.push_back(item.value());
  }
  OptimizerInfo& info = s.manifest.optimizer;
  info.type = c10::demangle(typeid(optimizer).name());
  for (size_t g = 0; g < view.groups.size(); ++g) {
    const auto& options = optimizer.param_groups().at(g).options();
    ParamGroupInfo group{.params = {}, .lr = options.get_lr(), .options = options_hex(options)};
    for (int p : view.groups[g]) {
      group.params.push_back(param_names[p]);
      auto it = slots.find(p);
      if (it == slots.end()) continue;
      for (const SlotInfo& slot : it->second) {
        info.state[param_names[p]].push_back({slot.key, slot.kind});
        plan.slot_entry[{p, slot.key}] = s.manifest.tensors.size();
        add_entry(s.manifest, param_names[p] + "." + slot.key, Part::kOptimizer,
                  static_cast<::torch::ScalarType>(slot.dtype), slot.shape);
        plan.whole.push_back(Tensor());
      }
    }
    info.groups.push_back(std::move(group));
  }
  return plan;
}

constexpr size_t kRecordHead = 3 * sizeof(int64_t);  // entry, offset, bytes
// Records start at multiples of 8 bytes in a message, so that a received
// whole tensor is used in place, aligned for every dtype.
size_t padded(size_t bytes) { return (bytes + 7) / 8 * 8; }

std::vector<Record> records_of(const Snapshot& s, const Plan& plan, const ShardedView& view,
                               const ::torch::optim::Optimizer& optimizer) {
  std::vector<Record> out;
  auto add = [&](size_t e, int64_t offset, const Tensor& value) {
    const int to = view.group.group_rank_of(s.manifest.tensors[e].rank);
    if (to >= 0) out.push_back({to, e, offset, value.detach().to(::torch::kCPU).contiguous()});
  };
  for (const PieceRef& piece : view.pieces) {
    if (!view.whole_params)  // the parameter's segment, in the masters' dtype
      for (size_t e : plan.param_entry.at(piece.param))
        add(e, piece.offset, piece.tensor.reshape({-1}));
    auto it = optimizer.state().find(state_key(piece.tensor));
    if (it == optimizer.state().end()) continue;
    for (const auto& [key, value] : state_values(*it->second)) {
      auto slot = plan.slot_entry.find({piece.param, key});
      if (slot == plan.slot_entry.end()) continue;
      auto [t, kind] = slot_tensor(value, key);
      if (kind == "tensor" && is_elementwise(value.toTensor(), piece, view))
        add(slot->second, piece.offset, t.reshape({-1}));
      else if (piece.offset == 0)  // a step count or scalar: one copy, from the first piece
        add(slot->second, 0, t);
    }
  }
  return out;
}

// Puts one record's bytes into this rank's entry. A record that is the whole
// tensor becomes the value itself (`keep`: a view of `source`, no copy);
// pieces are copied into a tensor of the entry's shape.
void place(Snapshot& s, std::vector<uint64_t>& covered, size_t e, int64_t offset,
           const Tensor& source, bool keep) {
  const Entry& entry = s.manifest.tensors[e];
  Tensor& v = s.values[e];
  const uint64_t bytes = source.nbytes();
  if (!v.defined() && offset == 0 && bytes == entry.bytes && keep) {
    v = source.view(entry.dtype).view(entry.shape);
  } else {
    if (!v.defined()) v = ::torch::empty(entry.shape, ::torch::TensorOptions().dtype(entry.dtype));
    const uint64_t begin = static_cast<uint64_t>(offset) * v.element_size();
    if (begin + bytes > v.nbytes() || !v.is_contiguous())
      throw Error(fmt::format("checkpoint directory save: a piece past the end of {}", entry.name));
    std::memcpy(static_cast<char*>(v.data_ptr()) + begin, source.data_ptr(), bytes);
  }
  covered[e] += bytes;
}

// The records for other ranks in one all-to-all within the shard group;
// returns what this rank was sent.
Tensor exchange(const std::vector<Record>& records, const lt::Group& group, const std::string& name,
                int me) {
  const int ranks = group.size();
  std::vector<int64_t> splits(ranks, 0);
  for (const Record& r : records)
    if (r.to != me) splits[r.to] += static_cast<int64_t>(kRecordHead + padded(r.value.nbytes()));
  std::vector<int64_t> at(ranks, 0);
  for (int r = 1; r < ranks; ++r) at[r] = at[r - 1] + splits[r - 1];
  Tensor send = ::torch::zeros({at[ranks - 1] + splits[ranks - 1]}, ::torch::kUInt8);
  char* base = static_cast<char*>(send.data_ptr());
  for (const Record& r : records) {
    if (r.to == me) continue;
    const int64_t head[3] = {static_cast<int64_t>(r.entry), r.offset,
                             static_cast<int64_t>(r.value.nbytes())};
    std::memcpy(base + at[r.to], head, kRecordHead);
    std::memcpy(base + at[r.to] + kRecordHead, r.value.data_ptr(), r.value.nbytes());
    at[r.to] += static_cast<int64_t>(kRecordHead + padded(r.value.nbytes()));
  }
  if (ranks == 1) return ::torch::empty({0}, ::torch::kUInt8);
  return lt::alltoall_with_splits(send, splits, name + ".ckdir.route", group.id()).output;
}

// Unpacks the records this rank was sent, in place where whole.
void receive(Snapshot& s, std::vector<uint64_t>& covered, const Tensor& inbox) {
  const char* data = static_cast<const char*>(inbox.data_ptr());
  const size_t size = inbox.nbytes();
  for (size_t pos = 0; pos < size;) {
    int64_t head[3];
    if (pos + kRecordHead > size) throw Error("checkpoint directory save: a truncated record");
    std::memcpy(head, data + pos, kRecordHead);
    pos += kRecordHead;
    const auto e = static_cast<size_t>(head[0]);
    if (e >= s.values.size() || head[2] < 0 || pos + head[2] > size)
      throw Error("checkpoint directory save: a corrupt record");
    place(s, covered, e, head[1], inbox.narrow(0, static_cast<int64_t>(pos), head[2]), true);
    pos += padded(static_cast<size_t>(head[2]));
  }
}

}  // namespace

void write_slot(std::ostream& out, const SlotInfo& s) {
  out << s.key << ' ' << s.kind << ' ' << s.dtype << ' ' << s.elementwise << ' ' << s.shape.size();
  for (int64_t d : s.shape) out << ' ' << d;
}

SlotInfo read_slot(std::istream& fields) {
  SlotInfo s;
  size_t dims = 0;
  fields >> s.key >> s.kind >> s.dtype >> s.elementwise >> dims;
  if (fields && dims <= 64) {
    s.shape.resize(dims);
    for (auto& d : s.shape) fields >> d;
  }
  if (!fields || dims > 64)
    throw Error("checkpoint directory: a corrupt optimizer-state description");
  return s;
}

size_t add_entry(Manifest& m, std::string name, Part part, ::torch::ScalarType dtype,
                 std::vector<int64_t> shape) {
  const int64_t numel = c10::multiply_integers(shape);
  m.tensors.push_back({.name = std::move(name),
                       .part = part,
                       .dtype = dtype,
                       .shape = std::move(shape),
                       .bytes = static_cast<uint64_t>(numel) * ::torch::elementSize(dtype)});
  return m.tensors.size() - 1;
}

std::vector<uint64_t> deliver(Snapshot& s, const std::vector<Record>& records,
                              const lt::Group& group, const std::string& name, bool own_copies) {
  LOCKSTEP_DCHECK_EQ(s.values.size(), s.manifest.tensors.size());
  std::vector<uint64_t> covered(s.values.size(), 0);
  const int me = group.rank();
  const Tensor inbox = exchange(records, group, name, me);
  receive(s, covered, inbox);
  for (const Record& r : records)  // our own pieces: views of the live tensors unless async
    if (r.to == me)
      place(s, covered, r.entry, r.offset, r.value.view({-1}).view(::torch::kUInt8), !own_copies);
  return covered;
}

Snapshot take_routed_snapshot(const ShardedView& view, const ::torch::optim::Optimizer& optimizer,
                              const lt::TrainingProgress& progress, bool own_copies) {
  LOCKSTEP_DCHECK(view.module != nullptr && view.params.size() == view.shapes.size());
  Snapshot s;
  s.manifest.progress = progress;
  s.manifest.world_size = lt::size();
  const auto slots = agreed_slots(view, optimizer);
  const Plan plan = plan_entries(s, view, optimizer, slots);
  assign_ranks(s.manifest.tensors, s.manifest.world_size);
  s.values.assign(s.manifest.tensors.size(), Tensor());
  std::vector<Record> records;
  try {
    records = records_of(s, plan, view, optimizer);
  } catch (
      const std::exception& e) {  // ours alone: we still send (nothing), so no rank waits on us
    s.failure = e.what();
    s.failure_is_cause = true;
  }
  std::vector<uint64_t> covered = deliver(s, records, view.group, view.name, own_copies);
  const int rank = lt::rank();
  for (size_t e = 0; e < s.values.size() && s.failure.empty(); ++e) {
    const Entry& entry = s.manifest.tensors[e];
    if (entry.rank != rank) continue;
    if (plan.whole[e].defined()) {  // held whole here: the writer takes its own
      s.values[e] = plan.whole[e].detach().to(::torch::kCPU).contiguous();
      if (own_copies) s.values[e] = s.values[e].clone();
      covered[e] = entry.bytes;
    }
    if (!s.values[e].defined() || covered[e] != entry.bytes)
      s.failure = fmt::format(
          "checkpoint directory save: {} arrived with {} of its {} bytes from "
          "the ranks that hold its pieces; every rank must step the same "
          "optimizer over the same model",
          entry.name, covered[e], entry.bytes);
  }
  return s;
}

bool routes_everywhere(const lt::Group& group, int replicas) {
  return group.is_world() || group.size() * replicas == lt::size();
}

}  // namespace lockstep::parallel::detail::ckdir
