#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/knobs.h"
#include "lockstep/commands.h"

namespace lockstep::cli {

int config_main(int argc, char** argv) {
  CLI::App app{"Print every LOCKSTEP_* knob: name, current value, default, meaning.", "lockstep config"};
  bool json = false;
  app.add_flag("--json", json, "one JSON object per knob");
  CLI11_PARSE(app, argc, argv);
  for (const Knob& k : all_knobs()) {
    std::string name(k.name);
    const char* env = std::getenv(name.c_str());
    std::string value = env ? env : std::string(k.default_value);
    if (json) {
      fmt::print("{{\"name\":\"{}\",\"value\":\"{}\",\"default\":\"{}\",\"set\":{}}}\n", name, value,
                 k.default_value, env ? "true" : "false");
    } else {
      fmt::print("{:<28} {:<10} {}{}\n", name, value.empty() ? "''" : value, k.help,
                 env ? "" : " [default]");
    }
  }
  return 0;
}

}  // namespace lockstep::cli
