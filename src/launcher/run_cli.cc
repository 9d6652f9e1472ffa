// `lockstep run` flag parsing (command_line.h splits off the program);
// supervision starts at supervise() (supervise.cc, supervisor.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/command_line.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/knob_flags.h"
#include "launcher/local_limits.h"
#include "launcher/mpirun.h"
#include "launcher/spec.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knob_suggest.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/slurm.h"
#include "lockstep/launcher/launcher.h"

namespace lockstep::launcher {
namespace {

constexpr int kUsageError = 2;

int usage_error(const std::string& message) {
  std::fprintf(stderr, "lockstep run: %s\nRun 'lockstep run --help' for the flags.\n",
               message.c_str());
  return kUsageError;
}

// Parses NAME=VALUE (or NAME, which passes the launcher's own value on).
std::pair<std::string, std::string> parse_env_flag(const std::string& text) {
  auto eq = text.find('=');
  std::string name = text.substr(0, eq);
  if (name.empty() || name.find_first_of(" \t\n") != std::string::npos)
    throw InvalidArgument(fmt::format("-x '{}': expected NAME=VALUE", text));
  if (name.rfind("LOCKSTEP_", 0) == 0 && !is_declared_knob(name))
    throw InvalidArgument(
        fmt::format("-x {}: unknown knob{}; 'lockstep config' lists every "
                    "LOCKSTEP_* variable",
                    name, did_you_mean(name)));
  if (is_launcher_owned(name))
    throw InvalidArgument(
        fmt::format("-x {}: lockstep run sets this variable for each worker", name));
  if (eq != std::string::npos) return {name, text.substr(eq + 1)};
  const char* value = std::getenv(name.c_str());
  if (!value)
    throw InvalidArgument(
        fmt::format("-x {}: not set in this environment; write -x {}=VALUE", name, name));
  return {name, value};
}

// Numbers are read as text and checked by command_line.h, so every bad value
// is reported with the flag's name and its valid range.
struct Parsed {
  LaunchSpec spec;
  std::string host_list, hostfile;
  std::string num_proc, start_timeout = "120", discovery_interval = "2";
  std::string slurm = "auto";
  bool remote_exec_given = false;
  std::string min_np, max_np, reset_limit;
  std::vector<std::string> knob_values;  // parallel to knob_flags()
  std::vector<std::string> env_flags;
  int servers = 0;
};

// Where the workers run: hosts, slots, remote start, Slurm, rendezvous.
void add_host_flags(CLI::App& app, Parsed& p) {
  app.add_option("-n,--num-proc", p.num_proc,
                 "-np N, -n N, --num-proc N: number of worker processes to start on this host")
      ->option_text("N");
  app.add_option("-H,--hosts", p.host_list,
                 "HOST:N,...: run on these hosts, N slots each (default: -np ranks on this host); "
                 "ranks fill each host's slots in order")
      ->option_text("LIST");
  app.add_option("--hostfile", p.hostfile,
                 "FILE of 'HOST slots=N' lines (as for mpirun); "
                 "instead of -H")
      ->option_text("FILE");
  app.add_option("--remote-exec", p.spec.remote_exec,
                 "command that runs a command on a host; {host} is replaced by the host, or the "
                 "host is appended (e.g. 'ip netns exec {host}')")
      ->option_text("COMMAND")
      ->capture_default_str();
  app.add_option("--start-timeout", p.start_timeout,
                 "seconds remote workers may take to start and reach the launcher")
      ->option_text("SECONDS")
      ->capture_default_str();
  app.add_option(
         "--slurm", p.slurm,
         "inside a Slurm allocation (SLURM_JOB_ID, SLURM_JOB_NODELIST): take hosts and slots "
         "from it and start every rank through srun; auto = when srun is on PATH and no "
         "-H/--hostfile is given (docs/slurm.md)")
      ->option_text("auto|on|off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--rendezvous-addr", p.spec.rendezvous_addr,
                 "IP address of this machine that every host can reach (default: 127.0.0.1 on "
                 "one host, else the route towards the first remote host)")
      ->option_text("IP");
}

// What every worker gets: output prefixes, knobs, environment, servers.
void add_worker_flags(CLI::App& app, Parsed& p, CLI::Option*& prefix_option) {
  prefix_option = app.add_flag("--prefix-output,!--no-prefix-output", p.spec.prefix_output,
                               "prefix each line of worker output with '[rank]: ' (default: on "
                               "when -np > 1)");
  const auto& flags = knob_flags();
  p.knob_values.resize(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    auto* opt =
        app.add_option(std::string(flags[i].flag), p.knob_values[i], knob_flag_help(flags[i]))
            ->option_text(std::string(flags[i].value_name));
    if (!knob_flag_choices(flags[i]).empty())
      opt->check(CLI::IsMember(knob_flag_choices(flags[i])));
  }
  app.add_option("-x,--env", p.env_flags,
                 "NAME=VALUE (or NAME: pass the launcher's value on): extra environment for every "
                 "worker; repeatable")
      ->option_text("NAME=VALUE")
      ->allow_extra_args(false);  // one value each: the next word may be the program
  app.add_option("--servers", p.servers,
                 "K dedicated parameter-server processes started after the -np workers (ranks "
                 "N..N+K-1; sets LOCKSTEP_SERVERS; docs/parallelism.md)")
      ->option_text("K")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--verbose", p.spec.verbose, "print the job id, rendezvous address and worker pids");
}

// Elastic jobs (docs/elastic.md).
void add_elastic_flags(CLI::App& app, Parsed& p) {
  app.add_option("--min-np", p.min_np,
                 "elastic: keep going while at least this many workers live (docs/elastic.md)");
  app.add_option("--max-np", p.max_np, "elastic: never run more workers than this (default -np)");
  app.add_option("--reset-limit", p.reset_limit,
                 "elastic: stop after this many re-formations (default: no limit)");
  app.add_option("--host-discovery-script", p.spec.elastic.discovery_script,
                 "elastic: command printing the available 'HOST:SLOTS' lines; polled to add "
                 "workers");
  app.add_option("--discovery-interval", p.discovery_interval,
                 "elastic: seconds between runs of the discovery script")
      ->capture_default_str();
}

void add_flags(CLI::App& app, Parsed& p, CLI::Option*& prefix_option) {
  add_host_flags(app, p);
  add_worker_flags(app, p, prefix_option);
  add_elastic_flags(app, p);
}

// The elastic flags, checked against -np.
void resolve_elastic(Parsed& p) {
  auto& e = p.spec.elastic;
  constexpr int kMany = std::numeric_limits<int>::max();
  e.discovery_interval = std::chrono::milliseconds(static_cast<int64_t>(
      parse_seconds_flag("--discovery-interval", p.discovery_interval, 3600) * 1000));
  if (!p.min_np.empty()) e.min_np = parse_int_flag("--min-np", p.min_np, 1, p.spec.num_proc);
  if (!p.max_np.empty()) e.max_np = parse_int_flag("--max-np", p.max_np, p.spec.num_proc, kMany);
  if (!p.reset_limit.empty())
    e.reset_limit = parse_int_flag("--reset-limit", p.reset_limit, 0, kMany);
  if (!e.enabled()) return;
  if (e.min_np == 0) e.min_np = 1;
  if (e.max_np == 0) e.max_np = std::max(p.spec.num_proc, e.min_np);
}

// Fills spec.env from the knob flags (in table order) and then -x.
void collect_env(Parsed& p) {
  const auto& flags = knob_flags();
  for (size_t i = 0; i < flags.size(); ++i) {
    if (p.knob_values[i].empty()) continue;
    if (flags[i].positive_number)
      parse_seconds_flag(flags[i].flag, p.knob_values[i], kMaxTimeoutSeconds);
    if (flags[i].count_or_auto && p.knob_values[i] != "auto")
      parse_int_flag(flags[i].flag, p.knob_values[i], 1, kMaxThreadsPerWorker);
    p.spec.env.emplace_back(flags[i].knob, p.knob_values[i]);
  }
  for (const auto& text : p.env_flags) p.spec.env.push_back(parse_env_flag(text));
}

// The backend the workers will be asked for (--backend, -x, or inherited).
std::string requested_backend(const LaunchSpec& spec) {
  std::string backend;
  if (knob_is_set("LOCKSTEP_BACKEND")) backend = knob_string("LOCKSTEP_BACKEND");
  for (const auto& [name, value] : spec.env)
    if (name == "LOCKSTEP_BACKEND") backend = value;
  return backend;
}

// How to get a transport this build lacks.
std::string how_to_build(std::string_view backend) {
  if (backend == "nccl")
    return "NCCL needs the CUDA toolkit and NCCL when lockstep is configured: build on a GPU "
           "node with scripts/setup.sh --gpu, or configure with -DLOCKSTEP_WITH_CUDA=ON (and "
           "NCCL_ROOT); docs/gpu.md";
  if (backend == "mpi")
    return "install Open MPI's development files and reconfigure (docs/backends.md)";
  return "run 'lockstep config' for the backends this build holds";
}

// A backend the workers could not create fails here, before any starts (a
// job of /bin/true would otherwise "succeed" with it).
void check_backend_built(const LaunchSpec& spec, std::span<const std::string_view> built) {
  const std::string backend = requested_backend(spec);
  if (backend.empty() || backend == "auto") return;
  if (std::find(built.begin(), built.end(), backend) != built.end()) return;
  throw InvalidArgument(fmt::format("backend {} is not built into this lockstep (it has: {}); {}",
                                    backend, fmt::join(built, ", "), how_to_build(backend)));
}

// Each rank runs as a one-task job step on its host: Slurm then accounts for
// it, confines it and cleans up after it. --overlap: the steps share the
// allocation instead of queueing for each other's CPUs.
constexpr const char* kSrunExec = "srun --nodes=1 --ntasks=1 --nodelist={host} --overlap --quiet";

// Inside a Slurm allocation, its hosts and slots stand in for -H.
void resolve_slurm(Parsed& p) {
  const bool hosts_given = !p.host_list.empty() || !p.hostfile.empty();
  if (p.slurm == "off" || (p.slurm == "auto" && hosts_given)) return;
  if (hosts_given)
    throw InvalidArgument("--slurm on takes the hosts from Slurm: drop -H/--hostfile");
  auto allocation = slurm::current_allocation();
  if (!allocation) {
    if (p.slurm == "on")
      throw InvalidArgument(
          "--slurm on: not inside a Slurm allocation (SLURM_JOB_ID and "
          "SLURM_JOB_NODELIST are unset); use salloc or sbatch");
    return;
  }
  if (resolve_program("srun").empty()) {
    if (p.slurm == "on") throw InvalidArgument("--slurm on: srun is not on PATH");
    return;
  }
  for (size_t i = 0; i < allocation->hosts.size(); ++i)
    p.spec.hosts.push_back({allocation->hosts[i], allocation->slots[i]});
  p.spec.through_slurm = true;
  if (!p.remote_exec_given) p.spec.remote_exec = kSrunExec;
}

// -H / --hostfile; -np defaults to every slot they offer. Then -np is checked
// against what the hosts (slots) and this host (CPUs, open files) allow.
void resolve_hosts(Parsed& p) {
  if (!p.host_list.empty() && !p.hostfile.empty())
    throw InvalidArgument("give either -H or --hostfile, not both");
  if (!p.host_list.empty()) p.spec.hosts = parse_host_list(p.host_list);
  if (!p.hostfile.empty()) p.spec.hosts = read_hostfile(p.hostfile);
  resolve_slurm(p);
  p.spec.start_timeout =
      std::chrono::seconds(parse_int_flag("--start-timeout", p.start_timeout, 1, 86400));
  constexpr int kMany = std::numeric_limits<int>::max();
  if (!p.num_proc.empty()) p.spec.num_proc = parse_int_flag("-np", p.num_proc, 1, kMany);
  if (p.spec.hosts.empty()) {
    if (p.spec.num_proc == 0)
      throw InvalidArgument("-np N is required: the number of workers (or give -H / --hostfile)");
    check_worker_count(p.spec.num_proc + p.servers, p.spec.num_proc + p.servers);
    return;
  }
  if (p.spec.num_proc == 0)
    for (const auto& h : p.spec.hosts) p.spec.num_proc += h.slots;
  int local = 0;
  for (const auto& where :
       place_ranks(p.spec.hosts, p.spec.num_proc + p.servers))  // checks the slots
    local += where.local;
  if (p.spec.through_slurm) local = 0;  // Slurm placed the allocation
  check_worker_count(local, p.spec.num_proc + p.servers);
}

// --servers K: K more processes after the workers, told their role by the knob.
void add_servers(Parsed& p) {
  if (p.servers == 0) return;
  if (p.spec.elastic.enabled())
    throw InvalidArgument("--servers cannot be combined with an elastic job (--min-np/--max-np)");
  p.spec.num_proc += p.servers;
  p.spec.env.emplace_back("LOCKSTEP_SERVERS", std::to_string(p.servers));
}

// Every check that needs no worker: exit status 2 with the flag's name.
void resolve(Parsed& p) {
  resolve_hosts(p);
  resolve_elastic(p);
  collect_env(p);
  add_servers(p);
}

// Whether a flag given without "=VALUE" takes the next word as its value.
bool takes_value(CLI::App& app, std::string_view flag) {
  const CLI::Option* opt = app.get_option_no_throw(std::string(flag));
  return opt && opt->get_expected_min() > 0;
}

}  // namespace

int run_main(int argc, char** argv, std::span<const std::string_view> built_backends) {
  CLI::App app{
      "Start N workers of PROGRAM on this host and supervise them.\n"
      "usage: lockstep run -np N [options] [--] PROGRAM [ARGS...]\n"
      "       lockstep run -H HOST:N,HOST:N [options] [--] PROGRAM [ARGS...]\n"
      "The program starts at the first word that is not a flag or a flag's value;\n"
      "everything after it reaches the program unchanged."};
  app.name("lockstep run");
  app.allow_extras();  // reported below, in our words
  Parsed parsed;
  CLI::Option* prefix_option = nullptr;
  CommandLine line;
  try {
    add_flags(app, parsed, prefix_option);
    line = split_command_line(std::vector<std::string>(argv + 1, argv + argc),
                              [&](std::string_view flag) { return takes_value(app, flag); });
    app.parse(std::vector<std::string>(line.flags.rbegin(), line.flags.rend()));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  } catch (const Error& e) {
    return usage_error(e.what());
  }
  parsed.remote_exec_given = app.get_option("--remote-exec")->count() > 0;
  if (std::vector<std::string> rest = app.remaining(); !rest.empty())
    return usage_error(fmt::format("unknown flag '{}'", rest[0]));
  if (line.program.empty())
    return usage_error("no program to run: write [--] PROGRAM [ARGS...] after the flags");
  try {
    resolve(parsed);
    check_backend_built(parsed.spec, built_backends);
  } catch (const Error& e) {
    return usage_error(e.what());
  }
  parsed.spec.program = std::move(line.program);
  if (prefix_option->count() == 0) parsed.spec.prefix_output = parsed.spec.num_proc > 1;
  if (requested_backend(parsed.spec) == "mpi") {
    if (parsed.spec.elastic.enabled())
      return usage_error("elastic mode (--min-np/--max-np) needs the shm or gloo backend, not mpi");
    try {
      return exec_mpirun(parsed.spec);
    } catch (const Error& e) {
      return usage_error(e.what());
    }
  }
  return supervise(parsed.spec);
}

}  // namespace lockstep::launcher
