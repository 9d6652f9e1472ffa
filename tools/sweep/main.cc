// lockstep-sweep: `lockstep sweep ...` runs this binary (docs/sweep.md).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"
#include "tools/sweep/sweep.h"

namespace {

void add_flags(CLI::App& app, lockstep::sweep::SweepOptions& o) {
  app.add_option("--space", o.space_path, "search space JSON file (docs/sweep.md)")->required();
  app.add_option("--trials", o.trials, "trials to run (grid: at most this many; default the grid)");
  app.add_option("--num-proc", o.np, "-np N: workers per trial (each trial is a lockstep run job)")
      ->capture_default_str();
  app.add_option("--concurrent", o.concurrent, "trials at once: K or auto (slots / -np)")
      ->capture_default_str();
  app.add_option("--scheduler", o.scheduler, "random | grid | asha")
      ->check(CLI::IsMember({"random", "grid", "asha"}))
      ->capture_default_str();
  app.add_option(
         "--sampler", o.sampler,
         "how trials are drawn: grid | random (default: grid for --scheduler grid, else random)")
      ->check(CLI::IsMember({"grid", "random"}));
  app.add_option("--metric", o.metric, "metrics-line field to optimise")->capture_default_str();
  app.add_option("--mode", o.mode, "max | min")
      ->check(CLI::IsMember({"max", "min"}))
      ->capture_default_str();
  app.add_option("--budget-epochs", o.budget_epochs,
                 "most epochs per trial ({epochs} in the command); required by asha");
  app.add_option("--min-epochs", o.min_epochs, "asha: first rung")->capture_default_str();
  app.add_option("--eta", o.eta, "asha: keep the top 1/eta at each rung")->capture_default_str();
  app.add_option("--grid-points", o.grid_points, "grid: values per real range")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random sampling seed")->capture_default_str();
  app.add_option("--trial-timeout", o.trial_timeout,
                 "seconds a trial may run before it is killed and recorded as timed out (0: none)")
      ->capture_default_str();
  app.add_option("--dir", o.dir, "RUN_DIR: journal, trial logs and metrics; same DIR resumes")
      ->required();
  app.add_option("--slots", o.slots, "slots on this host (default: its CPUs)");
  app.add_option("-H,--hosts", o.hosts, "HOST:SLOTS,... trials are placed on one host each");
  app.add_option("--remote-exec", o.remote_exec, "passed to lockstep run for remote hosts");
  app.add_flag("--oversubscribe", o.oversubscribe,
               "allow more workers than slots (no CPU binding)");
  app.add_option("--run-arg", o.run_args, "extra flag for each trial's lockstep run (repeatable)")
      ->allow_extra_args(false);
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after the first "--" is the trial command; -np is mpirun's spelling.
  std::vector<std::string> args, command;
  bool in_command = false;
  for (int i = argc - 1; i >= 1; --i) {
    std::string a = argv[i];
    if (in_command || a != "--") continue;
    in_command = true;
    command.assign(argv + i + 1, argv + argc);
    argc = i;
  }
  for (int i = argc - 1; i >= 1; --i) args.insert(args.begin(), argv[i]);
  for (auto& a : args) {
    if (a == "-np")
      a = "--num-proc";
    else if (a.rfind("-np=", 0) == 0)
      a = "--num-proc=" + a.substr(4);
  }
  CLI::App app{
      "Hyper-parameter sweep: trials of `lockstep run -np N -- COMMAND` with {name} "
      "replaced by each trial's values (docs/sweep.md)",
      "lockstep sweep"};
  app.footer(
      "usage: lockstep sweep --space SPACE.json --trials T -np N --dir RUN_DIR "
      "[options] -- PROGRAM ARGS... {lr} {metrics} ...");
  lockstep::sweep::SweepOptions o;
  add_flags(app, o);
  try {
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.command = command;
  o.lockstep_bin = lockstep::executable_dir() + "/lockstep";
  try {
    return lockstep::sweep::run_sweep(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep sweep: {}\n", e.what());
    return 2;
  }
}
