#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/transport/transport.h"
#include "lockstep/base/knobs.h"
#include "lockstep/commands.h"

namespace lockstep::cli {
namespace {

// LOCKSTEP_BACKEND's choices in this build: the transport registry's.
std::string built_backends() {
  std::string out = "auto";
  for (const comm::Transport* t : comm::transports()) out += fmt::format("|{}", t->name);
  return out;
}

}  // namespace

int config_main(int argc, char** argv) {
  CLI::App app{"Print every LOCKSTEP_* knob: name, current value, default, meaning.", "lockstep config"};
  bool json = false;
  app.add_flag("--json", json, "one JSON object per knob");
  CLI11_PARSE(app, argc, argv);
  for (const Knob& k : all_knobs()) {
    std::string name(k.name);
    bool set = knob_is_set(name);
    std::string value = knob_string(name);
    std::string choices(k.choices);
    if (name == "LOCKSTEP_BACKEND") choices = built_backends();
    if (json) {
      nlohmann::json j = {{"name", name},          {"value", value},
                          {"default", std::string(k.default_value)},
                          {"help", std::string(k.help)}, {"set", set},
                          {"choices", choices},    {"set_by_launcher", k.owner == kLauncher}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{:<28} {:<10} {}{}{}\n", name, value.empty() ? "''" : value,
                 choices.empty() ? "" : fmt::format("[{}] ", choices), k.help,
                 set ? "" : " [default]");
    }
  }
  return 0;
}

}  // namespace lockstep::cli
