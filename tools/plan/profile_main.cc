// lockstep-profile: `lockstep profile [options] -- PROGRAM ARGS...` runs the
// program under `lockstep run` with LOCKSTEP_PROFILE set, waits for rank 0's
// profile and (unless --full) stops the program once it is written.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"
#include "lockstep/plan/profile.h"
#include "tools/common/cli_main.h"
#include "tools/plan/job.h"

namespace lockstep::plan_tool {
namespace {

struct ProfileOptions {
  int steps = 20;
  int warmup = 5;
  int np = 1;
  int threads = 0;
  std::string out = "profile.json";
  bool full = false;
  double timeout_s = 600;
  std::vector<std::string> program;
};

int run(const ProfileOptions& o) {
  if (o.program.empty())
    throw InvalidArgument("give the program after --: lockstep profile -- PROGRAM ARGS");
  if (o.steps < 1 || o.warmup < 0 || o.np < 1 || o.threads < 0)
    throw InvalidArgument("--steps and --np must be >= 1, --warmup and --threads >= 0");
  const std::string out = std::filesystem::absolute(o.out).string();
  JobSpec job;
  job.argv = {executable_dir() + "/lockstep",
              "run",
              "-np",
              std::to_string(o.np),
              "-x",
              "LOCKSTEP_PROFILE=" + out,
              "-x",
              "LOCKSTEP_PROFILE_STEPS=" + std::to_string(o.steps),
              "-x",
              "LOCKSTEP_PROFILE_WARMUP=" + std::to_string(o.warmup)};
  if (o.threads > 0) {
    job.argv.push_back("-x");
    job.argv.push_back("LOCKSTEP_INTRA_OP_THREADS=" + std::to_string(o.threads));
  }
  job.argv.push_back("--");
  job.argv.insert(job.argv.end(), o.program.begin(), o.program.end());
  job.log_path = out + ".log";
  job.stop_when = o.full ? "" : out;
  job.timeout_s = o.timeout_s;
  job.label = "profile";
  fmt::print(stderr, "lockstep profile: {} (log: {})\n", shell_join(job.argv), job.log_path);
  if (o.full) std::filesystem::remove(out);
  JobResult r = run_job(job);
  if (!std::filesystem::exists(out))
    throw Error(fmt::format(
        "no profile was written: the program ended (exit {}) before {} warm-up + {} recorded "
        "steps of DistributedOptimizer::step(); give it more steps or lower --steps/--warmup. "
        "Last lines of {}:\n{}",
        r.exit_code, o.warmup, o.steps, job.log_path, tail_of(job.log_path)));
  if (!r.stopped_early && r.exit_code != 0)
    fmt::print(stderr,
               "lockstep profile: warning: the program exited with {} (profile is "
               "complete)\n",
               r.exit_code);
  plan::Profile p = plan::load_profile(out);
  plan::ProfileSummary s = plan::summarize(p);
  fmt::print("wrote {}: {} steps after {} warm-up, {} rank(s), {} intra-op thread(s)\n", out,
             p.steps.size(), p.warmup_steps, p.world_size, p.intra_op_threads);
  fmt::print(
      "  step {:.2f} ms = forward {:.2f} + backward {:.2f} + sync {:.2f} + optimizer "
      "{:.2f} + other {:.2f} (medians); spread sigma {:.2f} ms\n",
      s.step_ms, s.forward_ms, s.backward_ms, s.sync_ms, s.optimizer_ms, s.other_ms,
      s.compute_sigma_ms);
  fmt::print("  {} gradients, {:.2f} MiB; {:.0f} samples per step{}\n", s.gradient_count,
             s.gradient_bytes / 1048576.0, s.samples_per_step,
             s.samples_per_step == 0 ? " (no DistributedSampler: pass lockstep plan "
                                       "--samples-per-step)"
                                     : "");
  if (r.stopped_early)
    fmt::print(
        "  (stopped the program once the profile was written; --full "
        "lets it finish)\n");
  return 0;
}

}  // namespace
}  // namespace lockstep::plan_tool

int main(int argc, char** argv) {
  using namespace lockstep::plan_tool;
  CLI::App app{"Record a step profile of a training program for `lockstep plan` (docs/plan.md)",
               "lockstep profile"};
  ProfileOptions o;
  app.add_option("--steps", o.steps, "steps to record")->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps to skip first")->capture_default_str();
  app.add_option("-n,--np", o.np, "workers (1: the profile the planner expects)")
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "intra-op threads per worker (LOCKSTEP_INTRA_OP_THREADS; 0: lockstep's default)")
      ->capture_default_str();
  app.add_option("-o,--out", o.out, "profile file")->capture_default_str();
  app.add_flag("--full", o.full, "let the program run to its end instead of stopping it");
  app.add_option("--timeout", o.timeout_s, "seconds before the program is stopped")
      ->capture_default_str();
  app.add_option("program", o.program, "-- PROGRAM ARGS...")->required();
  lockstep::plan_tool::accept_np_flag(argc, argv);
  return lockstep::cli::run_command(app, argc, argv, "lockstep profile", [&] { return run(o); });
}
