// The files of checkpoint directories: the root lock, each rank's
// safetensors files, the done markers, clean-up and retention (Note
// [Checkpoint directory layout] in lockstep/parallel/checkpoint_dir.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/torch/safetensors.h"
#include "parallel/checkpoint_dir_impl.h"

namespace lockstep::parallel::detail::ckdir {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLockFile = ".lockstep-checkpoint.lock";

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  throw Error(
      fmt::format("checkpoint directory: {} {}: {} (check the path is a directory, "
                  "writable and has space)",
                  what, path, std::strerror(err)));
}

// 0: locked; else the errno (EAGAIN/EACCES: someone else holds it).
int try_lock(int fd, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0 ? 0 : errno;
}

int open_lock_file(const std::string& root) {
  const std::string path = root + "/" + kLockFile;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot open the lock file", path, errno);
  return fd;
}

// "step-00000042" -> 42; -1 for any other name.
int64_t step_of(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0) return -1;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<std::pair<int64_t, fs::path>> step_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_manifest(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kManifest, ec);
}

std::string marker(const std::string& dir, int rank, bool failed) {
  return fmt::format("{}/rank-{}.{}", dir, rank, failed ? "failed" : "done");
}

}  // namespace

RootLock RootLock::shared(const std::string& root, std::chrono::seconds timeout) {
  int fd = open_lock_file(root);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const int err = try_lock(fd, F_RDLCK);
    if (err == 0 || (err != EAGAIN && err != EACCES)) return RootLock(fd);  // no locks: unguarded
    if (std::chrono::steady_clock::now() > deadline) {
      ::close(fd);
      throw Error(
          fmt::format("checkpoint directory {}: another process held {} for {} s (a save "
                      "or load of this root cleaning up); is a second job using it?",
                      root, kLockFile, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

RootLock RootLock::try_exclusive(const std::string& root) {
  int fd = ::open((root + "/" + kLockFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return RootLock(-1);
  if (try_lock(fd, F_WRLCK) == 0) return RootLock(fd);
  ::close(fd);  // a writer is live (or locks are unsupported): remove nothing
  return RootLock(-1);
}

RootLock::RootLock(RootLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
RootLock::~RootLock() { release(); }
void RootLock::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
    io_error("cannot create directory", path, ENOTDIR);
  }
  io_error("cannot create directory", path, errno);
}

void write_rank_files(const std::string& dir, const Snapshot& snapshot, int rank) {
  const Manifest& m = snapshot.manifest;
  for (Part part : {Part::kModel, Part::kOptimizer}) {
    lockstep::torch::NamedTensors mine;
    for (size_t i = 0; i < m.tensors.size(); ++i)
      if (m.tensors[i].part == part && m.tensors[i].rank == rank)
        mine.emplace_back(m.tensors[i].name, snapshot.values[i]);
    lockstep::torch::save_safetensors(
        dir + "/" + file_name(part, rank, m.world_size), mine,
        {{"format", "pt"}, {"step", std::to_string(m.progress.step)}});
  }
}

void write_marker(const std::string& dir, int rank, const std::string& save_id, bool failed,
                  const std::string& text) {
  lockstep::torch::write_file_atomically(marker(dir, rank, failed), save_id + "\n" + text);
}

void await_markers(const std::string& dir, int world_size, const std::string& save_id,
                   std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> done(world_size, false);
  auto ours = [&](const std::string& path, std::string* rest) {
    std::ifstream in(path, std::ios::binary);
    std::string id;
    if (!in || !std::getline(in, id) || id != save_id) return false;
    std::ostringstream text;
    text << in.rdbuf();
    *rest = text.str();
    return true;
  };
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(2 * pause, decltype(pause)(50))) {
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      std::string text;
      if (!done[r] && ours(marker(dir, r, true), &text))
        throw Error(fmt::format("checkpoint directory {}: rank {} could not write its files: {}",
                                dir, r, text));
      if (!done[r]) done[r] = ours(marker(dir, r, false), &text);
      if (!done[r]) missing.push_back(r);
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(
          fmt::format("checkpoint directory {}: rank(s) {} did not finish writing within "
                      "{} s (is every rank alive, and the root one directory all ranks "
                      "see? slow storage: raise CheckpointDirOptions::peer_timeout)",
                      dir, fmt::join(missing, ", "), timeout.count()));
    std::this_thread::sleep_for(pause);
  }
}

void remove_markers(const std::string& dir, int world_size) {
  for (int r = 0; r < world_size; ++r) {
    ::unlink(marker(dir, r, false).c_str());
    ::unlink(marker(dir, r, true).c_str());
  }
}

std::vector<std::string> complete_steps(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& [step, dir] : step_dirs(root))
    if (has_manifest(dir)) out.push_back(dir.string());
  return out;
}

void remove_incomplete_steps(const std::string& root) {
  RootLock lock = RootLock::try_exclusive(root);
  if (!lock.held()) return;
  int removed = 0;
  for (const auto& [step, dir] : step_dirs(root)) {
    if (has_manifest(dir)) continue;
    std::error_code ec;
    fs::remove_all(dir, ec);
    removed += !ec;
  }
  if (removed > 0)
    log(LogLevel::kWarning,
        "checkpoint directory {}: removed {} step folder(s) of interrupted "
        "saves",
        root, removed);
}

void apply_retention(const std::string& root, int keep) {
  if (keep <= 0) return;
  auto complete = complete_steps(root);
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    // The manifest first: a crash mid-removal leaves an incomplete folder,
    // never one that looks complete.
    std::error_code ec;
    if (fs::remove(fs::path(complete[i]) / kManifest, ec)) fs::remove_all(complete[i], ec);
    if (ec)
      log(LogLevel::kWarning, "checkpoint directory: cannot remove old step {}: {}", complete[i],
          ec.message());
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error("cannot open", path, errno);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace lockstep::parallel::detail::ckdir
