#include "lockstep/base/executable.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep {
namespace {

// The link's target, or "" when it cannot be read (errno says why).
std::string read_self_link() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf);
  if (n == static_cast<ssize_t>(sizeof buf)) errno = ENAMETOOLONG;  // full: maybe truncated
  if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

std::string executable_path() {
  std::string path = read_self_link();
  if (path.empty())
    throw Error(fmt::format("cannot read /proc/self/exe (the path of this executable): {}",
                            std::strerror(errno)));
  return path;
}

std::string executable_dir() {
  const std::string path = read_self_link();
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace lockstep
