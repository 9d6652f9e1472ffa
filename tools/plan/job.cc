#include "tools/plan/job.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "tools/common/process.h"

namespace lockstep::plan_tool {

using Clock = std::chrono::steady_clock;

std::string tail_of(const std::string& log_path) { return tools::tail_of(log_path, 15, "    | "); }

void accept_np_flag(int argc, char** argv) {
  static char np[] = "--np";
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i)
    if (std::string(argv[i]) == "-np") argv[i] = np;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_of(" '\"$\\*?;&|<>(){}") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

JobResult run_job(const JobSpec& spec) {
  if (!spec.stop_when.empty()) std::filesystem::remove(spec.stop_when);
  const auto t0 = Clock::now();
  tools::ChildSpec child;
  child.argv = spec.argv;
  child.env = spec.env;
  child.log_path = spec.log_path;
  tools::ChildProcess job(child);
  JobResult r;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double next_progress = 15;
  bool signalled = false;
  double signalled_at = 0;
  for (;;) {
    if (auto status = job.poll()) {
      r.exit_code = tools::exit_code_of(*status);
      break;
    }
    const double t = elapsed();
    if (tools::stop_requested()) {
      // `lockstep run` stops its workers and removes their shared memory on
      // SIGTERM; the group gets SIGKILL (job's destructor) only if it has not
      // finished within 5 s.
      job.signal(SIGTERM);
      for (int i = 0; i < 100 && !job.poll(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      throw Error(fmt::format("interrupted while running {}", spec.label));
    }
    if (!signalled && !spec.stop_when.empty() && std::filesystem::exists(spec.stop_when)) {
      // SIGTERM to `lockstep run`: it stops its workers and cleans up.
      job.signal(SIGTERM);
      signalled = true;
      signalled_at = t;
      r.stopped_early = true;
    }
    if (!signalled && t > spec.timeout_s) {
      job.signal(SIGTERM);
      signalled = true;
      signalled_at = t;
      r.timed_out = true;
    }
    if (signalled && t - signalled_at > 10) job.signal_group(SIGKILL);  // never hang on a stuck job
    if (t > next_progress) {
      fmt::print(stderr, "  ... {} still running ({:.0f} s)\n", spec.label, t);
      next_progress += 15;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.seconds = elapsed();
  return r;
}

}  // namespace lockstep::plan_tool
