// `lockstep doctor DIR`: reads every rank's flight-recorder dump in DIR and
// prints which rank diverged or stalled first (docs/engine.md).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "tools/common/cli_checks.h"
#include "tools/doctor/diagnose.h"
#include "tools/lockstep/commands.h"

namespace lockstep::cli {

int doctor_main(int argc, char** argv) {
  std::string dir;
  bool json = false;
  CLI::App app{
      "Merge the flight-recorder dumps of every rank of a failed or hung job and say "
      "which rank diverged or stalled first. Ranks dump on every failure, or on "
      "SIGUSR1 (kill -USR1 PID) while running.",
      "lockstep doctor"};
  app.add_option("DIR", dir, "the dump folder (LOCKSTEP_FLIGHT_DIR; the failing ranks print it)")
      ->required();
  app.add_flag("--json", json, "print the diagnosis as one JSON object");
  if (auto status = parse_or_status(app, argc, argv)) return *status;
  try {
    auto dumps = doctor::load_dumps(dir);
    doctor::Diagnosis d = doctor::diagnose(dumps);
    if (json) {
      nlohmann::json j = {{"verdict", doctor::verdict_name(d.verdict)},
                          {"culprits", d.culprits},
                          {"summary", d.summary},
                          {"details", d.details},
                          {"dumps", dumps.size()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::fputs(doctor::report(dumps, d).c_str(), stdout);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep doctor: %s\n", e.what());
    return 1;
  }
}

}  // namespace lockstep::cli
