// Internals of checkpoint directories (Note [Checkpoint directory layout] in
// lockstep/parallel/checkpoint_dir.h): the manifest, the assignment of
// tensors to ranks, the snapshot of a module and optimizer, and the files.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/base/safetensors.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/state_check.h"
#include "parallel/piece_state.h"

namespace lockstep::parallel::detail::ckdir {

inline constexpr int64_t kFormatVersion = 1;
inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kIndex = "model.safetensors.index.json";

enum class Part { kModel, kOptimizer };

// One tensor of a checkpoint and the rank whose file holds it.
struct Entry {
  std::string name;  // in its file: "fc1.weight", or "fc1.weight.exp_avg"
  Part part = Part::kModel;
  ::torch::ScalarType dtype = ::torch::kFloat;
  std::vector<int64_t> shape{};
  uint64_t bytes = 0;
  int rank = -1;
};

// One value of a parameter's optimizer state: the key its serialize() uses
// and what it is ("tensor", "int", "double", "bool"); tensors and scalars
// alike are stored as "<param>.<key>".
struct StateSlot {
  std::string key;
  std::string kind;
};
struct ParamGroupInfo {
  std::vector<std::string> params;  // parameter names, in the group's order
  double lr = 0;                    // for people reading the manifest
  std::string options;              // the group's options archive, hex
};
struct OptimizerInfo {
  std::string type;  // "torch::optim::Adam"
  std::vector<ParamGroupInfo> groups;
  std::map<std::string, std::vector<StateSlot>> state;  // by parameter name
};

struct Manifest {
  int64_t format_version = kFormatVersion;
  std::string lockstep_version;
  int world_size = 1;
  lockstep::torch::TrainingProgress progress;
  std::vector<std::string> rng;  // every rank's CPU generator state, hex
  std::vector<Entry> tensors;    // model entries first, in state_dict order
  OptimizerInfo optimizer;
};

// ---- names (checkpoint_dir_manifest.cc)
std::string step_dir_name(int64_t step);
std::string file_name(Part part, int rank, int world_size);
// Greedy by bytes, deterministic: sets every entry's rank.
void assign_ranks(std::vector<Entry>& entries, int world_size);
std::string manifest_json(const Manifest& manifest);
Manifest parse_manifest(const std::string& text, const std::string& path);
std::string index_json(const Manifest& manifest);
std::string to_hex(const std::string& bytes);
std::string from_hex(const std::string& hex, const std::string& what);
// Appends an entry of `dtype` and `shape` (bytes computed); its index.
size_t add_entry(Manifest& manifest, std::string name, Part part, ::torch::ScalarType dtype,
                 std::vector<int64_t> shape);

// One optimizer-state value of a parameter as a routed save plans it
// (described by the ranks that hold it, exchanged as text).
struct SlotInfo {
  std::string key, kind;
  int dtype = 0;               // ScalarType
  bool elementwise = false;    // one value per element: the parameter's (or slice's) shape
  std::vector<int64_t> shape;  // its own
};
// Its fields on one line (no newline), and back; read_slot throws
// lockstep::Error on a corrupt description.
void write_slot(std::ostream& out, const SlotInfo& slot);
SlotInfo read_slot(std::istream& fields);
// One SlotInfo per line (model_parts_describe.cc writes them).
std::vector<SlotInfo> parse_slots(const std::string& text);

// ---- module and optimizer (checkpoint_dir_state.cc)
struct Snapshot {
  Manifest manifest;                    // all but world_size, rng and the ranks
  std::vector<::torch::Tensor> values;  // parallel to manifest.tensors; CPU, contiguous
  // A routed snapshot's error that only this rank saw: the rank still takes
  // part in the exchange, and the save's agreement raises it on every rank
  // alike, a cause (its own pieces did not fit) before a consequence (a
  // piece it writes did not arrive).
  std::string failure{};
  bool failure_is_cause = false;
};
// Every tensor of `module` and `optimizer`, as views of the live tensors
// where they are CPU-contiguous (an async save then copies its own share).
Snapshot take_snapshot(const ::torch::nn::Module& module,
                       const ::torch::optim::Optimizer& optimizer,
                       const lockstep::torch::TrainingProgress& progress);
// An optimizer-state value as a tensor (ints, doubles and bools as 0-d
// tensors) and its kind ("tensor", "int", "double", "bool"); throws
// InvalidArgument naming `where` for anything else.
std::pair<::torch::Tensor, std::string> state_value_tensor(const c10::IValue& value,
                                                           const std::string& where);
// Async: owned copies of this rank's share; every other value is dropped.
void keep_own_copies(Snapshot& snapshot, int rank);
// Refuses (lockstep::Error naming the first mismatch) a manifest whose
// optimizer type, groups or state do not fit `optimizer` over `module`.
void check_optimizer_matches(const Manifest& manifest, const ::torch::nn::Module& module,
                             const ::torch::optim::Optimizer& optimizer, const std::string& what);
// Refuses (lockstep::Error) a manifest saved by another optimizer type or
// with other param groups: `live[g]` names group g's parameters as this run
// holds them, in the group's order.
void check_optimizer_groups(const Manifest& manifest, const ::torch::optim::Optimizer& optimizer,
                            const std::vector<std::vector<std::string>>& live,
                            const std::string& what);
// Replaces the optimizer's state and group options with the manifest's;
// `tensors` holds every optimizer entry by name.
void load_optimizer_state(const Manifest& manifest,
                          const std::map<std::string, ::torch::Tensor>& tensors,
                          ::torch::optim::Optimizer& optimizer);
// A param group's options archive, hex (the manifest's "options").
std::string options_hex(const ::torch::optim::OptimizerOptions& options);
std::string generator_state_hex();
void set_generator_state_hex(const std::string& hex);

// ---- files (checkpoint_dir_files.cc)
// A shared (writer) or exclusive (cleaner) lock on <root>/.lockstep-checkpoint.lock.
class RootLock {
 public:
  // Shared: waits up to `timeout` for a cleaner; throws lockstep::Error.
  static RootLock shared(const std::string& root, std::chrono::seconds timeout);
  // Exclusive: never waits; !held() when a writer holds the lock.
  static RootLock try_exclusive(const std::string& root);
  RootLock(RootLock&& other) noexcept;
  RootLock& operator=(RootLock&&) = delete;
  ~RootLock();
  bool held() const { return fd_ >= 0; }
  void release();

 private:
  explicit RootLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

void make_directory(const std::string& path);
// Writes this rank's model and optimizer files of `snapshot` into `dir`.
void write_rank_files(const std::string& dir, const Snapshot& snapshot, int rank);
void write_marker(const std::string& dir, int rank, const std::string& save_id, bool failed,
                  const std::string& text);
// Until every rank's done marker of `save_id` is there; throws naming a
// failed rank, or the missing ones after `timeout`.
void await_markers(const std::string& dir, int world_size, const std::string& save_id,
                   std::chrono::seconds timeout);
void remove_markers(const std::string& dir, int world_size);
// Complete step directories (with a manifest), oldest first.
std::vector<std::string> complete_steps(const std::string& root);
// Removes step directories without a manifest when no writer is live.
void remove_incomplete_steps(const std::string& root);
// Deletes all but the newest `keep` complete steps (manifest first).
void apply_retention(const std::string& root, int keep);
std::string read_whole_file(const std::string& path);

// ---- sharded strategies without a full view (checkpoint_dir_sharded.cc)
// What a strategy that splits parameters or optimizer state across ranks
// (FullyShardedModel, ShardedOptimizer) holds on this rank, as a save or a
// load of a checkpoint directory needs it: every entry is routed straight
// between the ranks that hold its pieces and the rank that writes it, so no
// rank ever holds the whole model or the whole optimizer state (Note
// [Routed checkpoint saves] in checkpoint_dir_sharded.cc).
struct ShardedView {
  const ::torch::nn::Module* module = nullptr;  // its names, order and buffers
  std::vector<::torch::Tensor> params;          // every parameter (the strategy's order)
  std::vector<std::vector<int64_t>> shapes;     // theirs, whole
  ::torch::ScalarType dtype = ::torch::kFloat;  // of the values the pieces hold (masters)
  bool whole_params = false;                    // ZeRO: params hold their values on every rank
  bool whole_tensors = false;                   // pieces are whole parameters (kTensor granularity)
  std::vector<PieceRef> pieces;          // this rank's: values (unless whole_params) and state keys
  std::vector<std::vector<int>> groups;  // per optimizer group: parameter indices
  lockstep::torch::Group group;          // the ranks whose pieces tile every parameter
  std::string name;                      // collective-name prefix
};
// Whether every rank of the job is in a group like view.group whose pieces
// tile the model (the world, or HSDP's shard groups): then the routed save
// and load apply; otherwise the callers take the full view.
bool routes_everywhere(const lockstep::torch::Group& group, int replicas);
// The snapshot of a routed save: the whole manifest (ranks assigned) and
// values for this rank's entries only: what other ranks sent, and views of
// this rank's own live tensors (copies with `own_copies`, for an async save
// whose training goes on). Collective over the job.
Snapshot take_routed_snapshot(const ShardedView& view, const ::torch::optim::Optimizer& optimizer,
                              const lockstep::torch::TrainingProgress& progress, bool own_copies);
// Loads step directory `dir` (its manifest `m`) into the view's pieces, the
// module's buffers (and parameters, whole_params) and the optimizer; reads
// only the byte ranges this rank holds. Checks everything first; throws
// lockstep::Error before anything changes. Collective-free.
void load_routed(const std::string& dir, const Manifest& m, const ShardedView& view,
                 ::torch::optim::Optimizer& optimizer, lockstep::torch::TrainingProgress& progress);
// The contiguous runs of a slice [begin, +length) along dim `dim` of a whole
// tensor of shape `shape`, flattened (Note [Routed saves of model parts]):
// `count` runs of `run` elements, run o starting at element at(o). Both the
// routed save (one record per run) and the routed load (one read per run)
// take them from here.
struct SliceRuns {
  int64_t count = 1, run = 0, stride = 0, first = 0;
  int64_t at(int64_t o) const { return o * stride + first; }
};
inline SliceRuns slice_runs(const std::vector<int64_t>& shape, int64_t dim, int64_t begin,
                            int64_t length) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  return {
      .count = outer, .run = length * inner, .stride = shape[dim] * inner, .first = begin * inner};
}

// What a routed load puts in place, all read and checked before anything
// changes: (destination, value) copies, and the optimizer's state as a
// manifest of this rank's names with their values ("<name>.<key>").
struct Staged {
  std::vector<std::pair<::torch::Tensor, ::torch::Tensor>> copies;
  Manifest optimizer_part;
  std::map<std::string, ::torch::Tensor> state;
};
// Puts `staged` in place (the copies first, then the optimizer state, so one
// staged copy is alive at a time), then `m`'s progress and this rank's
// generator state. Nothing is refused from here on.
void commit_staged(Staged& staged, const Manifest& m, ::torch::optim::Optimizer& optimizer,
                   lockstep::torch::TrainingProgress& progress);

// The rank files of one step directory, for reads of byte ranges of its
// entries (checkpoint_dir_routed_load.cc): a file is opened on first use and
// its header checked against the manifest before a byte of data is read.
// Owns the open files; keeps a reference to `m`, which must outlive it. Not
// thread-safe. Every read throws lockstep::Error naming the file.
class RangeReader {
 public:
  RangeReader(std::string dir, const Manifest& m);
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;
  ~RangeReader();
  // The manifest's entry `name`; lockstep::Error when there is none.
  const Entry& entry(const std::string& name) const;
  // Elements [offset, +out.numel()) of `name` (flattened) into `out`, a
  // contiguous tensor of the entry's dtype.
  void read_into(const std::string& name, int64_t offset, const ::torch::Tensor& out);
  // Elements [offset, +count) as a new 1-D tensor.
  ::torch::Tensor read(const std::string& name, int64_t offset, int64_t count);
  ::torch::Tensor read_whole(const std::string& name);

 private:
  struct File {
    int fd = -1;
    std::string path;
    uint64_t data_start = 0;
    std::map<std::string, SafetensorsEntry> spans;
  };
  const File& file(Part part, int rank);

  std::string dir_;
  const Manifest& m_;
  std::map<std::string, const Entry*> entries_;
  std::map<std::pair<int, int>, File> files_;  // (part, rank) -> open file
};
// One piece of an entry on its way to the rank that writes it: elements
// [offset, +value.numel()) of entry `entry` (flattened). `value` is a CPU,
// contiguous view of the live tensor where it can be.
struct Record {
  int to = 0;  // group rank of the writer
  size_t entry = 0;
  int64_t offset = 0;
  ::torch::Tensor value;
};
// Delivers `records` to their writers in one all-to-all within `group`
// (collective name `name` + ".ckdir.route"; collective over the group) and
// puts what reaches this rank into s.values (sized like the manifest's
// tensors): a record that is a whole tensor in place, pieces copied into a
// tensor of the entry's shape. This rank's own records stay views of the
// live tensors unless `own_copies`. Returns the bytes each entry received.
std::vector<uint64_t> deliver(Snapshot& s, const std::vector<Record>& records,
                              const lockstep::torch::Group& group, const std::string& name,
                              bool own_copies);
// The routed snapshot of a tensor- or pipeline-parallel model
// (checkpoint_dir_parts.cc): the manifest a single process's save of the
// whole model writes, and values for this rank's entries only, each slice
// sent by the lowest rank that holds it. Collective over the job.
Snapshot take_parts_snapshot(const ModelParts& parts, const ::torch::optim::Optimizer& optimizer,
                             const lockstep::torch::TrainingProgress& progress, bool own_copies);
// The routed load of a tensor- or pipeline-parallel model
// (checkpoint_dir_parts_load.cc): the newest complete step under `root`,
// checked against the whole model the ranks describe, each rank reading
// only its own slices and their optimizer state. False when there is none.
// Collective over the job (the descriptions); throws lockstep::Error before
// anything changes.
bool load_parts_routed(const std::string& root, const ModelParts& parts,
                       ::torch::optim::Optimizer& optimizer,
                       lockstep::torch::TrainingProgress& progress);
// The manifest's tensors of one part, as check_state_matches takes them.
std::vector<lockstep::torch::TensorInfo> part_infos(const Manifest& manifest, Part part);
// Throws when the manifest lists optimizer state that no entry holds.
void check_state_entries(const Manifest& manifest, const std::string& what);
// Reaches into FullyShardedModel and ShardedOptimizer (their friend) for the
// routed save and load (checkpoint_dir_strategies.cc).
struct Access {
  // nullopt when the strategy's group does not cover the job (a subset of
  // the ranks shards the model): the caller takes the full view instead.
  static std::optional<ShardedView> view(FullyShardedModel& fsdp,
                                         const ::torch::optim::Optimizer& optimizer);
  static std::optional<ShardedView> view(const ::torch::nn::Module& module,
                                         ShardedOptimizer& optimizer);
  // Around a routed load: in-flight gathers land before the shards change;
  // afterwards the device copies and the units that stay gathered are
  // refreshed (collective over fsdp's group).
  static void before_load(FullyShardedModel& fsdp);
  static void after_load(FullyShardedModel& fsdp);
};
// What the readers share: the newest complete step (and its manifest) under
// root after removing leftovers; false when there is none.
bool newest_complete(const std::string& root, std::string* dir, Manifest* manifest);

}  // namespace lockstep::parallel::detail::ckdir
