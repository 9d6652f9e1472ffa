// `lockstep run --backend mpi`: hands the job to Open MPI's mpirun, which
// alone can form an MPI world (N processes started any other way would be N
// singleton worlds). The flags map onto mpirun's; supervision, output and
// teardown are then mpirun's.
#include "launcher/mpirun.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/job.h"

extern char** environ;

namespace lockstep::launcher {
namespace {

// Every LOCKSTEP_* variable of this process and every -x / knob flag, by name
// (their values are exported here first, so mpirun's -x NAME forwards them).
std::set<std::string> exported_names(const LaunchSpec& spec) {
  std::set<std::string> names;
  for (const auto& [name, value] : spec.env) {
    ::setenv(name.c_str(), value.c_str(), 1);
    names.insert(name);
  }
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    if (entry.starts_with("LOCKSTEP_")) names.emplace(entry.substr(0, entry.find('=')));
  }
  return names;
}

}  // namespace

std::vector<std::string> mpirun_command(const LaunchSpec& spec, bool as_root) {
  std::vector<std::string> argv{"mpirun", "-np", std::to_string(spec.num_proc), "--oversubscribe"};
  if (as_root) argv.emplace_back("--allow-run-as-root");
  if (spec.prefix_output) argv.emplace_back("--tag-output");
  if (!spec.hosts.empty()) {
    std::vector<std::string> hosts;
    for (const auto& h : spec.hosts) hosts.push_back(fmt::format("{}:{}", h.host, h.slots));
    argv.insert(argv.end(), {"--host", fmt::format("{}", fmt::join(hosts, ","))});
  }
  if (spec.remote_exec != LaunchSpec{}.remote_exec) {
    if (spec.remote_exec.find("{host}") != std::string::npos)
      throw InvalidArgument(
          "--backend mpi: mpirun's remote agent takes the host as its first "
          "argument; a --remote-exec with {host} cannot be passed to it");
    argv.insert(argv.end(), {"--mca", "plm_rsh_agent", spec.remote_exec});
  }
  for (const auto& name : exported_names(spec)) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), spec.program.begin(), spec.program.end());
  return argv;
}

int exec_mpirun(const LaunchSpec& spec) {
  std::vector<std::string> argv = mpirun_command(spec, ::geteuid() == 0);
  if (resolve_program("mpirun").empty()) {
    std::fprintf(stderr,
                 "lockstep run: --backend mpi needs Open MPI's mpirun, which is not on "
                 "PATH (Debian: apt-get install openmpi-bin)\n");
    return 127;
  }
  if (spec.verbose)
    std::fprintf(stderr, "lockstep run: exec %s\n",
                 fmt::format("{}", fmt::join(argv, " ")).c_str());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  ::execvp("mpirun", raw.data());
  std::fprintf(stderr, "lockstep run: cannot execute mpirun: %s\n", std::strerror(errno));
  return 127;
}

}  // namespace lockstep::launcher
