#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

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
      nlohmann::json j = {{"name", name}, {"value", value},
                          {"default", std::string(k.default_value)}, {"help", std::string(k.help)},
                          {"set", env != nullptr}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{:<28} {:<10} {}{}\n", name, value.empty() ? "''" : value, k.help,
                 env ? "" : " [default]");
    }
  }
  return 0;
}

}  // namespace lockstep::cli
