// `lockstep run` flag parsing. Everything after the flags is the worker
// program; supervision lives in supervisor.cc.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/hosts.h"
#include "launcher/knob_flags.h"
#include "launcher/mpirun.h"
#include "launcher/spec.h"
#include "lockstep/base/error.h"
#include "lockstep/launcher/launcher.h"

namespace lockstep::launcher {
namespace {

constexpr int kUsageError = 2;

int usage_error(const std::string& message) {
  std::fprintf(stderr, "lockstep run: %s\nRun 'lockstep run --help' for the flags.\n",
               message.c_str());
  return kUsageError;
}

// CLI11 short options are one character, so the conventional -np is renamed.
std::vector<std::string> normalise(std::vector<std::string> args) {
  for (auto& a : args)
    if (a == "-np") a = "--num-proc";
    else if (a.rfind("-np=", 0) == 0) a = "--num-proc=" + a.substr(4);
  return args;
}

// Parses NAME=VALUE (or NAME, which passes the launcher's own value on).
std::pair<std::string, std::string> parse_env_flag(const std::string& text) {
  auto eq = text.find('=');
  std::string name = text.substr(0, eq);
  if (name.empty() || name.find_first_of(" \t\n") != std::string::npos)
    throw InvalidArgument(fmt::format("-x '{}': expected NAME=VALUE", text));
  if (name.rfind("LOCKSTEP_", 0) == 0 && !is_declared_knob(name))
    throw InvalidArgument(fmt::format(
        "-x {}: unknown knob (a typo?); 'lockstep config' lists every LOCKSTEP_* variable", name));
  if (is_launcher_owned(name))
    throw InvalidArgument(fmt::format("-x {}: lockstep run sets this variable for each worker", name));
  if (eq != std::string::npos) return {name, text.substr(eq + 1)};
  const char* value = std::getenv(name.c_str());
  if (!value)
    throw InvalidArgument(fmt::format("-x {}: not set in this environment; write -x {}=VALUE",
                                      name, name));
  return {name, value};
}

struct Parsed {
  LaunchSpec spec;
  std::string host_list, hostfile;
  int start_timeout_s = 120;
  double discovery_interval_s = 2;
  std::vector<std::string> knob_values;  // parallel to knob_flags()
  std::vector<std::string> env_flags;
};

void add_flags(CLI::App& app, Parsed& p, CLI::Option*& prefix_option) {
  app.add_option("--num-proc", p.spec.num_proc,
                 "-np N, --num-proc N: number of worker processes to start on this host")
      ->option_text("N");
  app.add_option("-H,--hosts", p.host_list,
                 "HOST:N,...: run on these hosts, N slots each (default: -np ranks on this host); "
                 "ranks fill each host's slots in order")
      ->option_text("LIST");
  app.add_option("--hostfile", p.hostfile, "FILE of 'HOST slots=N' lines (as for mpirun); "
                 "instead of -H")
      ->option_text("FILE");
  app.add_option("--remote-exec", p.spec.remote_exec,
                 "command that runs a command on a host; {host} is replaced by the host, or the "
                 "host is appended (e.g. 'ip netns exec {host}')")
      ->option_text("COMMAND")
      ->capture_default_str();
  app.add_option("--start-timeout", p.start_timeout_s,
                 "seconds remote workers may take to start and reach the launcher")
      ->option_text("SECONDS")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--rendezvous-addr", p.spec.rendezvous_addr,
                 "IP address of this machine that every host can reach (default: 127.0.0.1 on "
                 "one host, else the route towards the first remote host)")
      ->option_text("IP");
  prefix_option = app.add_flag("--prefix-output,!--no-prefix-output", p.spec.prefix_output,
                               "prefix each line of worker output with '[rank]: ' (default: on "
                               "when -np > 1)");
  const auto& flags = knob_flags();
  p.knob_values.resize(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    auto* opt = app.add_option(std::string(flags[i].flag), p.knob_values[i], knob_flag_help(flags[i]))
                    ->option_text(std::string(flags[i].value_name));
    if (!flags[i].choices.empty()) opt->check(CLI::IsMember(knob_flag_choices(flags[i])));
    if (flags[i].positive_number) opt->check(CLI::PositiveNumber);
  }
  app.add_option("-x,--env", p.env_flags,
                 "NAME=VALUE (or NAME: pass the launcher's value on): extra environment for every "
                 "worker; repeatable")
      ->option_text("NAME=VALUE");
  app.add_flag("--verbose", p.spec.verbose, "print the job id, rendezvous address and worker pids");
  auto& e = p.spec.elastic;
  app.add_option("--min-np", e.min_np,
                 "elastic: keep going while at least this many workers live (docs/elastic.md)");
  app.add_option("--max-np", e.max_np, "elastic: never run more workers than this (default -np)");
  app.add_option("--reset-limit", e.reset_limit,
                 "elastic: stop after this many re-formations (default: no limit)");
  app.add_option("--host-discovery-script", e.discovery_script,
                 "elastic: command printing the available 'HOST:SLOTS' lines; polled to add "
                 "workers");
  app.add_option("--discovery-interval", p.discovery_interval_s,
                 "elastic: seconds between runs of the discovery script")
      ->capture_default_str();
}

// The elastic flags, checked against -np.
void resolve_elastic(Parsed& p) {
  auto& e = p.spec.elastic;
  e.discovery_interval =
      std::chrono::milliseconds(static_cast<int64_t>(p.discovery_interval_s * 1000));
  if (!e.enabled()) return;
  if (e.min_np == 0) e.min_np = 1;
  if (e.max_np == 0) e.max_np = std::max(p.spec.num_proc, e.min_np);
  if (e.min_np < 1 || e.min_np > p.spec.num_proc)
    throw InvalidArgument(fmt::format("--min-np {} must be between 1 and -np {}", e.min_np,
                                      p.spec.num_proc));
  if (e.max_np < p.spec.num_proc)
    throw InvalidArgument(fmt::format("--max-np {} is below -np {}", e.max_np, p.spec.num_proc));
  if (e.reset_limit < -1) throw InvalidArgument("--reset-limit must be >= 0");
  if (p.discovery_interval_s <= 0) throw InvalidArgument("--discovery-interval must be > 0");
}

// Fills spec.env from the knob flags (in table order) and then -x.
void collect_env(Parsed& p) {
  const auto& flags = knob_flags();
  for (size_t i = 0; i < flags.size(); ++i)
    if (!p.knob_values[i].empty()) p.spec.env.emplace_back(flags[i].knob, p.knob_values[i]);
  for (const auto& text : p.env_flags) p.spec.env.push_back(parse_env_flag(text));
}

// The backend the workers will be asked for (--backend, -x, or inherited).
std::string requested_backend(const LaunchSpec& spec) {
  std::string backend;
  if (const char* inherited = std::getenv("LOCKSTEP_BACKEND")) backend = inherited;
  for (const auto& [name, value] : spec.env)
    if (name == "LOCKSTEP_BACKEND") backend = value;
  return backend;
}

// -H / --hostfile; -np defaults to every slot they offer.
void resolve_hosts(Parsed& p) {
  if (!p.host_list.empty() && !p.hostfile.empty())
    throw InvalidArgument("give either -H or --hostfile, not both");
  if (!p.host_list.empty()) p.spec.hosts = parse_host_list(p.host_list);
  if (!p.hostfile.empty()) p.spec.hosts = read_hostfile(p.hostfile);
  p.spec.start_timeout = std::chrono::seconds(p.start_timeout_s);
  if (p.spec.hosts.empty()) {
    if (p.spec.num_proc == 0) throw InvalidArgument("-np N is required (or -H / --hostfile)");
    return;
  }
  if (p.spec.num_proc == 0)
    for (const auto& h : p.spec.hosts) p.spec.num_proc += h.slots;
  place_ranks(p.spec.hosts, p.spec.num_proc);  // checks that the slots suffice
}

}  // namespace

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> program;
  bool has_separator = false;
  if (auto it = std::find(args.begin(), args.end(), "--"); it != args.end()) {
    program.assign(it + 1, args.end());
    args.erase(it, args.end());
    has_separator = true;
  }
  args = normalise(std::move(args));

  CLI::App app{"Start N workers of PROGRAM on this host and supervise them.\n"
               "usage: lockstep run -np N [options] -- PROGRAM [ARGS...]\n"
               "       lockstep run -H HOST:N,HOST:N [options] -- PROGRAM [ARGS...]"};
  app.name("lockstep run");
  app.prefix_command();  // the program may follow the flags without "--"
  Parsed parsed;
  CLI::Option* prefix_option = nullptr;
  try {
    add_flags(app, parsed, prefix_option);
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  } catch (const Error& e) {
    return usage_error(e.what());
  }
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && (has_separator || rest[0].rfind('-', 0) == 0))
    return usage_error(fmt::format("unknown flag or argument '{}'", rest[0]));
  if (!has_separator) program = rest;
  try {
    resolve_hosts(parsed);
  } catch (const Error& e) {
    return usage_error(e.what());
  }
  if (parsed.spec.num_proc < 1)
    return usage_error(fmt::format("-np must be at least 1 (got {})", parsed.spec.num_proc));
  if (program.empty()) return usage_error("no program to run: write -- PROGRAM [ARGS...]");
  try {
    resolve_elastic(parsed);
    collect_env(parsed);
  } catch (const Error& e) {
    return usage_error(e.what());
  }
  parsed.spec.program = std::move(program);
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
