#include "launcher/job.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "lockstep/base/error.h"

extern char** environ;

namespace lockstep::launcher {

std::string new_job_id() {
  unsigned char raw[6];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("lockstep run: getrandom() failed; cannot make a job id");
    got += static_cast<size_t>(n);
  }
  std::string id;
  for (unsigned char c : raw) id += fmt::format("{:02x}", c);
  return id;
}

std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchSpec& spec,
                                                                    const JobIdentity& job,
                                                                    int rank,
                                                                    const Placement& where) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    if (where.local || entry.starts_with("LOCKSTEP_"))
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : spec.env) env[name] = value;
  env["LOCKSTEP_RANK"] = std::to_string(rank);
  env["LOCKSTEP_SIZE"] = std::to_string(spec.num_proc);
  env["LOCKSTEP_LOCAL_RANK"] = std::to_string(where.local_rank);
  env["LOCKSTEP_LOCAL_SIZE"] = std::to_string(where.local_size);
  env["LOCKSTEP_CROSS_RANK"] = std::to_string(where.cross_rank);
  env["LOCKSTEP_CROSS_SIZE"] = std::to_string(where.cross_size);
  env["LOCKSTEP_HOST"] = where.host;
  env["LOCKSTEP_JOB_ID"] = job.job_id;
  env["LOCKSTEP_RENDEZVOUS"] = job.rendezvous;
  env["LOCKSTEP_SECRET"] = job.secret_hex;
  return {env.begin(), env.end()};
}

std::vector<std::string> as_env_strings(
    const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

int remove_job_shared_memory(std::string_view job_id) {
  if (job_id.empty()) return 0;  // would match every job's segments
  std::string prefix = fmt::format("lockstep-{}", job_id);
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (dirent* entry = ::readdir(dir)) {
    std::string_view name(entry->d_name);
    if (name.substr(0, prefix.size()) == prefix && ::unlinkat(::dirfd(dir), entry->d_name, 0) == 0)
      ++removed;
  }
  ::closedir(dir);
  return removed;
}

std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

}  // namespace lockstep::launcher
