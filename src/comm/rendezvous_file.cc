#include "comm/rendezvous_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::comm {

void write_rendezvous_file(const std::string& path, const RendezvousFile& note,
                           std::string_view who) {
  const std::string text =
      fmt::format("{}\n{}\n{}\n", kRendezvousFileMagic, note.address, note.secret);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(
        fmt::format("{}: cannot create {}: {} (set LOCKSTEP_RENDEZVOUS_DIR to a "
                    "directory every host of the job can read and write)",
                    who, tmp, std::strerror(errno)));
  bool ok = ::fchmod(fd, 0600) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot write {}: {}", who, path, std::strerror(errno)));
  }
}

std::optional<RendezvousFile> read_rendezvous_file(const std::string& path, std::string_view who) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw Error(
        fmt::format("{}: refusing {}: it must belong to this user and be readable by "
                    "nobody else (mode 0600), but has owner {} and mode {:o}",
                    who, path, st.st_uid, st.st_mode & 0777));
  std::ifstream in(path);
  std::string magic;
  RendezvousFile note;
  std::getline(in, magic);
  std::getline(in, note.address);
  std::getline(in, note.secret);
  if (magic != kRendezvousFileMagic || note.address.empty() || note.secret.empty())
    throw Error(fmt::format("{}: {} is not a lockstep rendezvous file", who, path));
  return note;
}

#ifdef LOCKSTEP_HAVE_RENDEZVOUS

namespace {
struct Served {
  std::unique_ptr<rendezvous::StoreServer> server;
  std::string file;
  ~Served() {
    if (!file.empty()) ::unlink(file.c_str());
  }
};
}  // namespace

void keep_serving(std::unique_ptr<rendezvous::StoreServer> server, std::string file) {
  static Served served;
  served.server = std::move(server);
  served.file = std::move(file);
}

#endif

}  // namespace lockstep::comm
