// CheckpointWriter: the collective part of a save on the training thread
// (snapshot, cross-rank agreement), the files on this thread or a background
// one (Note [Checkpoint directory layout] in lockstep/parallel/checkpoint_dir.h).
#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel::detail::ckdir {
namespace fs = std::filesystem;
namespace lt = lockstep::torch;
namespace {

constexpr auto kLockWait = std::chrono::seconds(60);

// What every rank tells the others before a save: what it holds, whether its
// previous save failed, whether its snapshot failed (the error, hex: it may
// span lines) and (rank 0) whether the step is there already.
struct Agreement {
  std::string fingerprint, id, rng, snapshot_failure;
  bool previous_failed = false, step_exists = false, failure_is_cause = false;
  std::string bytes() const {
    return fmt::format("{}\n{}\n{}\n{}\n{:d}\n{:d}\n{:d}", fingerprint, id, rng,
                       to_hex(snapshot_failure), previous_failed, step_exists, failure_is_cause);
  }
  static Agreement parse(const std::string& bytes) {
    std::istringstream in(bytes);
    Agreement a;
    int failed = 0, exists = 0, cause = 0;
    std::string failure_hex;
    std::getline(in, a.fingerprint);
    std::getline(in, a.id);
    std::getline(in, a.rng);
    std::getline(in, failure_hex);
    in >> failed >> exists >> cause;
    a.failure_is_cause = cause != 0;
    a.snapshot_failure = from_hex(failure_hex, "a rank's save agreement");
    a.previous_failed = failed != 0;
    a.step_exists = exists != 0;
    return a;
  }
};

std::string fingerprint(const Manifest& m) {
  std::string text = std::to_string(m.progress.step);
  for (const Entry& e : m.tensors)
    text += fmt::format("|{}:{}:{}:{}", e.name, static_cast<int>(e.dtype), fmt::join(e.shape, ","),
                        e.rank);
  return fmt::format("{:016x}", std::hash<std::string>{}(text));
}

std::string random_id() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}", device(), device());
}

// Rank 0's part once every rank's files are in: the index and the manifest
// (the step is complete from here), then retention and leftovers. `lock`
// is released once the manifest is in: the folder is live till then.
void complete_save(const std::string& root, const std::string& dir, const Snapshot& snap,
                   RootLock& lock, const CheckpointDirOptions& options) {
  lt::write_file_atomically(dir + "/" + kIndex, index_json(snap.manifest));
  lt::write_file_atomically(dir + "/" + kManifest, manifest_json(snap.manifest));
  lock.release();
  apply_retention(root, options.keep_last);
  remove_incomplete_steps(root);
}

// This rank's files, under a shared lock of the root (returned: rank 0
// keeps it until the manifest is in).
RootLock write_own_files(const std::string& root, const std::string& dir, const Snapshot& snap,
                         int rank) {
  std::error_code ec;
  fs::create_directories(root, ec);  // again: it may have been removed since construction
  RootLock lock = RootLock::shared(root, kLockWait);
  make_directory(dir);
  write_rank_files(dir, snap, rank);
  return lock;
}

// The files of an async save, on the background thread: no collective can
// run there, so ranks meet through marker files (Note [Checkpoint directory
// layout]): every rank writes its done (or failed) marker, rank 0 waits for
// all of them and completes the step.
void write_save_async(const std::string& root, const std::string& dir, const Snapshot& snap,
                      int rank, const std::string& id, const CheckpointDirOptions& options) {
  try {
    RootLock lock = write_own_files(root, dir, snap, rank);
    write_marker(dir, rank, id, /*failed=*/false, "");
    if (rank != 0) return;
    await_markers(dir, snap.manifest.world_size, id, options.peer_timeout);
    remove_markers(dir, snap.manifest.world_size);
    complete_save(root, dir, snap, lock, options);
  } catch (const std::exception& e) {
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
      try {
        write_marker(dir, rank, id, /*failed=*/true, e.what());
      } catch (const std::exception&) {  // rank 0 then names us after its timeout
      }
    }
    throw;
  }
}

// Every rank's error text of one phase (empty: it went well), gathered.
std::vector<std::string> gather_failures(const std::string& failure, int world, const char* name) {
  return world == 1 ? std::vector<std::string>{failure} : lt::allgather_bytes(failure, name);
}

// A synchronous save, on the training thread: the ranks agree by two small
// collectives instead of marker files, so no one polls the directory (the
// markers' backoff cost the main job's small model several times its
// rank-0 file). Every rank throws alike: its own error, else the first
// failed rank's named.
void write_save_sync(const std::string& root, const std::string& dir, const Snapshot& snap,
                     int rank, int64_t step, const CheckpointDirOptions& options) {
  const int world = snap.manifest.world_size;
  std::optional<RootLock> lock;
  std::exception_ptr mine;
  std::string failure;
  try {
    lock.emplace(write_own_files(root, dir, snap, rank));
  } catch (const std::exception& e) {
    failure = e.what();
    mine = std::current_exception();
  }
  const auto written = gather_failures(failure, world, "ckdir.saved");
  if (rank != 0) lock.reset();
  if (mine) std::rethrow_exception(mine);
  for (int r = 0; r < world; ++r)
    if (!written[r].empty())
      throw Error(fmt::format("checkpoint directory {}: rank {} failed to save step {}: {}", root,
                              r, step, written[r]));
  if (rank == 0) {
    try {
      complete_save(root, dir, snap, *lock, options);
    } catch (const std::exception& e) {
      failure = e.what();
      mine = std::current_exception();
    }
  }
  const auto completed = gather_failures(failure, world, "ckdir.completed");
  if (mine) std::rethrow_exception(mine);
  if (!completed[0].empty())
    throw Error(fmt::format("checkpoint directory {}: rank 0 failed to complete step {}: {}", root,
                            step, completed[0]));
}

// The first rank's snapshot failure, causes first, on every rank alike (the
// rank where it happened throws its own words).
void throw_snapshot_failure(const std::vector<Agreement>& all, int rank, const std::string& root,
                            int64_t step) {
  for (const bool cause : {true, false})
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].snapshot_failure.empty() || all[r].failure_is_cause != cause) continue;
      if (static_cast<int>(r) == rank) throw Error(all[r].snapshot_failure);
      throw Error(
          fmt::format("checkpoint directory {}: rank {} could not take its share of step {} "
                      "(it threw this there): {}; step {} is not saved on any rank",
                      root, r, step, all[r].snapshot_failure, step));
    }
}

// The one collective of a save: every rank learns whether any rank's
// previous save or this snapshot failed, whether the step is complete already (rank 0 looks)
// and whether all hold the same tensors, and throws alike; rank 0's id names
// the save and every rank's generator state goes into the manifest.
std::string agree(const std::string& root, const std::string& dir, Snapshot& snap, int rank,
                  const std::exception_ptr& previous) {
  const int world = snap.manifest.world_size;
  const int64_t step = snap.manifest.progress.step;
  std::error_code ec;
  Agreement mine{.fingerprint = fingerprint(snap.manifest),
                 .id = random_id(),
                 .rng = generator_state_hex(),
                 .snapshot_failure = snap.failure,
                 .previous_failed = previous != nullptr,
                 .step_exists = rank == 0 && fs::is_regular_file(dir + "/" + kManifest, ec),
                 .failure_is_cause = snap.failure_is_cause};
  std::vector<Agreement> all;
  if (world == 1)
    all.push_back(mine);
  else
    for (const std::string& b : lt::allgather_bytes(mine.bytes(), "ckdir.save"))
      all.push_back(Agreement::parse(b));
  for (int r = 0; r < world; ++r) {
    if (!all[r].previous_failed) continue;
    if (previous) std::rethrow_exception(previous);
    throw Error(
        fmt::format("checkpoint directory {}: rank {}'s previous save failed (it threw the "
                    "error there); step {} is not saved on any rank",
                    root, r, step));
  }
  throw_snapshot_failure(all, rank, root, step);
  if (all[0].step_exists)
    throw InvalidArgument(
        fmt::format("checkpoint directory {} already holds a complete checkpoint "
                    "of step {}; save each step once (progress.step is the step "
                    "you are at) or remove that folder",
                    dir, step));
  for (int r = 1; r < world; ++r)
    if (all[r].fingerprint != all[0].fingerprint)
      throw InvalidArgument(
          fmt::format("checkpoint directory {}: rank {} holds other tensors (names, "
                      "shapes or dtypes) or another step than rank 0; every rank "
                      "must save the same model and optimizer",
                      root, r));
  for (const Agreement& a : all) snap.manifest.rng.push_back(a.rng);
  return all[0].id;
}

}  // namespace
}  // namespace lockstep::parallel::detail::ckdir

namespace lockstep::parallel {
namespace fs = std::filesystem;
namespace lt = lockstep::torch;

struct CheckpointWriter::Impl {
  std::string root;
  CheckpointDirOptions options;
  std::thread thread;
  std::atomic<bool> finished{false};
  std::exception_ptr error;  // of the background save, set before `finished`

  void join() {
    if (thread.joinable()) thread.join();
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
  }
  // The save in flight, and whether it failed (rethrown by run()).
  std::exception_ptr finish_previous() {
    try {
      join();
    } catch (const std::exception&) {
      return std::current_exception();
    }
    return nullptr;
  }
  // Everything after the snapshot: agreement, then the files here or on the
  // background thread. `snap` holds owned values of this rank's share when
  // async.
  void run(detail::ckdir::Snapshot snap, int64_t step, std::exception_ptr previous);
  void save(const ::torch::nn::Module& module, const ::torch::optim::Optimizer& optimizer,
            const lt::TrainingProgress& progress) {
    std::exception_ptr previous = finish_previous();
    detail::ckdir::Snapshot snap = detail::ckdir::take_snapshot(module, optimizer, progress);
    snap.manifest.world_size = lt::size();
    detail::ckdir::assign_ranks(snap.manifest.tensors, lt::size());
    if (options.async) detail::ckdir::keep_own_copies(snap, lt::rank());  // the pause: our share
    run(std::move(snap), progress.step, previous);
  }
  void save(const detail::ckdir::ShardedView& view, const ::torch::optim::Optimizer& optimizer,
            const lt::TrainingProgress& progress) {
    std::exception_ptr previous = finish_previous();
    run(detail::ckdir::take_routed_snapshot(view, optimizer, progress, options.async),
        progress.step, previous);
  }
  void save(const ModelParts& parts, const ::torch::optim::Optimizer& optimizer,
            const lt::TrainingProgress& progress) {
    std::exception_ptr previous = finish_previous();
    run(detail::ckdir::take_parts_snapshot(parts, optimizer, progress, options.async),
        progress.step, previous);
  }
};

void CheckpointWriter::Impl::run(detail::ckdir::Snapshot snap, int64_t step,
                                 std::exception_ptr previous) {
  using namespace detail::ckdir;  // in the function: unity builds batch this file with others
  const int rank = lt::rank();
  const std::string dir = root + "/" + step_dir_name(step);
  const std::string id = agree(root, dir, snap, rank, previous);
  if (!options.async) {
    write_save_sync(root, dir, snap, rank, step, options);
    return;
  }
  finished = false;
  thread = std::thread([this, dir, snap = std::move(snap), rank, id] {
    try {
      detail::ckdir::write_save_async(root, dir, snap, rank, id, options);
    } catch (...) {
      error = std::current_exception();
    }
    finished = true;
  });
}

CheckpointWriter::CheckpointWriter(std::string root, CheckpointDirOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (root.empty())
    throw InvalidArgument("CheckpointWriter: the root directory is empty; pass a path");
  if (options.keep_last < 0)
    throw InvalidArgument(
        fmt::format("CheckpointWriter: keep_last is {}; pass 0 (keep all) or the "
                    "number of steps to keep",
                    options.keep_last));
  impl_->root = std::move(root);
  impl_->options = options;
  std::error_code ec;
  fs::create_directories(impl_->root, ec);  // a failure is reported by the first save, with errno
}

CheckpointWriter::~CheckpointWriter() {
  try {
    impl_->join();
  } catch (const std::exception& e) {
    log(LogLevel::kError, "checkpoint directory {}: the last save failed: {}", impl_->root,
        e.what());
  }
}

void CheckpointWriter::save(const ::torch::nn::Module& module,
                            const ::torch::optim::Optimizer& optimizer,
                            const lt::TrainingProgress& progress) {
  // Asked for its layout (Note [One checkpoint call]): tensor-parallel
  // layers are routed as model parts; a module FSDP or a Pipeline holds is
  // refused by name, nothing written.
  if (auto parts = detail::sliced_parts(module, "CheckpointWriter::save", impl_->root)) {
    impl_->save(*parts, optimizer, progress);
    return;
  }
  lt::detail::require_whole_state(module, "CheckpointWriter::save", impl_->root);
  impl_->save(module, optimizer, progress);
}

// The sharded strategies: routed (each tensor straight to its writer, no
// full view) when their group covers the job; the full view otherwise.
void CheckpointWriter::save(FullyShardedModel& fsdp, ::torch::optim::Optimizer& optimizer,
                            const lt::TrainingProgress& progress) {
  if (auto view = detail::ckdir::Access::view(fsdp, optimizer)) {
    impl_->save(*view, optimizer, progress);
    return;
  }
  fsdp.with_full_view(optimizer, /*keep_changes=*/false,
                      [&] { impl_->save(fsdp.wrapped(), optimizer, progress); });
}

void CheckpointWriter::save(const ::torch::nn::Module& module, ShardedOptimizer& optimizer,
                            const lt::TrainingProgress& progress) {
  if (auto view = detail::ckdir::Access::view(module, optimizer)) {
    impl_->save(*view, optimizer.optimizer(), progress);
    return;
  }
  auto full = optimizer.gather_full_state();
  optimizer.with_full_view(std::move(full),
                           [&] { impl_->save(module, optimizer.optimizer(), progress); });
}

void CheckpointWriter::save(const ModelParts& parts, const ::torch::optim::Optimizer& optimizer,
                            const lt::TrainingProgress& progress) {
  impl_->save(parts, optimizer, progress);
}

void CheckpointWriter::save(Pipeline& pipeline, const ::torch::optim::Optimizer& optimizer,
                            const lt::TrainingProgress& progress) {
  impl_->save(model_parts(pipeline), optimizer, progress);
}

void CheckpointWriter::poll() {
  if (impl_->thread.joinable() && impl_->finished) impl_->join();
}

void CheckpointWriter::wait() { impl_->join(); }

const std::string& CheckpointWriter::root() const { return impl_->root; }

}  // namespace lockstep::parallel
