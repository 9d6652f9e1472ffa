// Temporary files of atomic writes (write_file_atomically) and their clean-up.
// Internal to src/torch; tests use it directly.
//
// Note [Checkpoint temporary files]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A writer killed mid-write leaves `.<file>.tmp.<host>.<pid>.<n>` behind, as
// big as a checkpoint. Clean-up must never remove a file another process is
// still writing (another job's rank 0, a second writer on a shared
// filesystem), so a writer holds an open-file-description write lock
// (F_OFD_SETLK) on its temp file from creation to rename; the kernel drops it
// when the writer dies, however it dies. A file is stale when its lock can be
// taken. Two guards cover what the lock cannot see:
//   * the creation window: a cleaner may lock and unlink a file between the
//     writer's open and its lock, so after locking the writer checks its
//     descriptor is still the file at that name, else starts over;
//   * filesystems whose locks are local to one host (NFS mounted `nolock`):
//     a file named for another host, or of the old `.tmp.<pid>` form, is
//     removed only once it has not been written for kForeignStaleAge.
// Where locks are unsupported nothing is removed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace lockstep::torch::detail {

inline constexpr auto kForeignStaleAge = std::chrono::seconds(60);

// An open, locked, empty temporary file beside `target`. The lock lasts until
// `fd` is closed.
struct LockedTemp {
  int fd = -1;
  std::string path;
};
// Throws lockstep::Error naming the directory on failure.
LockedTemp create_locked_temp(const std::string& target);

// write_file_atomically for bytes produced while writing: `write` fills the
// locked temp file's descriptor (it must not close it), which is then
// fsync'ed and renamed over `path`, and the directory fsync'ed; on any throw
// the temp file is removed. Defined in checkpoint.cc; save_safetensors
// streams through it.
void write_atomically(const std::string& path,
                      const std::function<void(int fd, const std::string& temp_path)>& write);

struct RemovedTemps {
  uint64_t files = 0;
  uint64_t bytes = 0;
};
// Removes the stale temporary files of `target` (never a live writer's).
RemovedTemps remove_stale_temps(const std::string& target);

}  // namespace lockstep::torch::detail
