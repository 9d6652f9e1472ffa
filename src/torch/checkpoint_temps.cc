// Note [Checkpoint temporary files] in checkpoint_temps.h.
#include "torch/checkpoint_temps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/log.h"

namespace lockstep::torch::detail {
namespace fs = std::filesystem;
namespace {

std::string directory_of(const std::string& target) {
  fs::path p(target);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

std::string temp_prefix(const std::string& target) {
  return "." + fs::path(target).filename().string() + ".tmp.";
}

// Write-locks the whole file without waiting; false when another open file
// description holds a lock (or locking is unsupported).
bool try_lock(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

bool same_file(int fd, const std::string& path) {
  struct stat by_fd {
  }, by_name{};
  return ::fstat(fd, &by_fd) == 0 && ::lstat(path.c_str(), &by_name) == 0 &&
         by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino;
}

// The host a temp file's name says its writer ran on: "<host>.<pid>.<n>";
// nullopt for the old "<pid>" form.
std::optional<std::string> writer_host(std::string_view suffix) {
  auto last = suffix.rfind('.');
  if (last == std::string_view::npos) return std::nullopt;
  auto pid_dot = suffix.rfind('.', last - 1);
  if (pid_dot == std::string_view::npos || pid_dot == 0) return std::nullopt;
  return std::string(suffix.substr(0, pid_dot));
}

bool old_enough(const struct stat& st) {
  auto written = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
  return std::chrono::system_clock::now() - written >= kForeignStaleAge;
}

}  // namespace

LockedTemp create_locked_temp(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  static const std::string host = host_name();
  const std::string dir = directory_of(target);
  for (int attempt = 0; attempt < 8; ++attempt) {
    LockedTemp temp;
    temp.path = fmt::format("{}/{}{}.{}.{}", dir, temp_prefix(target), host, ::getpid(),
                            counter.fetch_add(1));
    temp.fd = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (temp.fd < 0 && errno == EEXIST) continue;  // a dead namesake's file: another name
    if (temp.fd < 0)
      throw Error(
          fmt::format("checkpoint: cannot create {}: {} (check the directory exists, is "
                      "writable and has space)",
                      temp.path, std::strerror(errno)));
    // Unlocked, or unlinked by a cleaner before we locked: start over.
    if (try_lock(temp.fd) && same_file(temp.fd, temp.path)) return temp;
    ::close(temp.fd);
  }
  throw Error(
      fmt::format("checkpoint: cannot create a locked temporary file in {}; does the "
                  "filesystem support fcntl locks?",
                  dir));
}

RemovedTemps remove_stale_temps(const std::string& target) {
  RemovedTemps removed;
  const std::string dir = directory_of(target);
  const std::string prefix = temp_prefix(target);
  static const std::string host = host_name();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string path = entry.path().string();
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    bool stale =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && try_lock(fd) && same_file(fd, path);
    if (stale && writer_host(std::string_view(name).substr(prefix.size())) != host)
      stale = old_enough(st);  // its host's locks may be invisible here
    if (stale && ::unlink(path.c_str()) == 0) {
      ++removed.files;
      removed.bytes += static_cast<uint64_t>(st.st_size);
    }
    ::close(fd);  // drops our lock
  }
  if (removed.files > 0)
    log(LogLevel::kWarning,
        "checkpoint: removed {} temporary file(s) ({:.1f} MB) of {} left by an interrupted write",
        removed.files, removed.bytes / 1e6, target);
  return removed;
}

}  // namespace lockstep::torch::detail
