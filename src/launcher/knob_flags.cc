#include "launcher/knob_flags.h"

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::launcher {
namespace {

const lockstep::Knob* find_knob(std::string_view name) {
  auto knobs = all_knobs();
  auto it = std::find_if(knobs.begin(), knobs.end(), [&](const Knob& k) { return k.name == name; });
  return it == knobs.end() ? nullptr : &*it;
}

}  // namespace

const std::vector<KnobFlag>& knob_flags() {
  static const std::vector<KnobFlag> flags = [] {
    std::vector<KnobFlag> table = {
        {"--backend", "LOCKSTEP_BACKEND", "NAME", false},
        {"--timeout", "LOCKSTEP_TIMEOUT", "SECONDS", true},
        {"--timeline", "LOCKSTEP_TIMELINE", "FILE", false},
        {"--bind-to", "LOCKSTEP_BIND_TO", "POLICY", false},
        {"--overlap", "LOCKSTEP_OVERLAP", "MODE", false},
        {"--threads-per-worker", "LOCKSTEP_INTRA_OP_THREADS", "T|auto", false, true},
        {"--log-level", "LOCKSTEP_LOG_LEVEL", "LEVEL", false},
        {"--network-interface", "LOCKSTEP_NETWORK_INTERFACE", "IFACE", false},
        {"--hierarchical", "LOCKSTEP_HIERARCHICAL", "MODE", false},
        {"--profile", "LOCKSTEP_PROFILE", "FILE", false},
    };
    for (const auto& f : table)
      if (!find_knob(f.knob))
        throw Error(
            fmt::format("lockstep run: flag {} maps to undeclared knob {}; declare it in "
                        "src/base/knobs.cc",
                        f.flag, f.knob));
    return table;
  }();
  return flags;
}

std::string knob_flag_help(const KnobFlag& flag) {
  const Knob* knob = find_knob(flag.knob);
  return fmt::format("{}{} (sets {}; default {})",
                     knob->choices.empty() ? "" : fmt::format("{}: ", knob->choices), knob->help,
                     knob->name, knob->default_value.empty() ? "unset" : knob->default_value);
}

std::vector<std::string> knob_flag_choices(const KnobFlag& flag) {
  return knob_choices(*find_knob(flag.knob));
}

bool is_declared_knob(std::string_view name) { return find_knob(name) != nullptr; }

bool is_launcher_owned(std::string_view name) {
  const Knob* knob = find_knob(name);
  return knob && knob->owner == kLauncher;
}

}  // namespace lockstep::launcher
