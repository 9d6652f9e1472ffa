#include "launcher/knob_flags.h"

#include <algorithm>
#include <array>

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
        {"--backend", "LOCKSTEP_BACKEND", "auto|shm|mpi|gloo", "NAME", false},
        {"--timeout", "LOCKSTEP_TIMEOUT", "", "SECONDS", true},
        {"--timeline", "LOCKSTEP_TIMELINE", "", "FILE", false},
        {"--bind-to", "LOCKSTEP_BIND_TO", "core|none|auto", "POLICY", false},
        {"--overlap", "LOCKSTEP_OVERLAP", "auto|on|off", "MODE", false},
        {"--log-level", "LOCKSTEP_LOG_LEVEL", "error|warning|info|debug", "LEVEL", false},
        {"--network-interface", "LOCKSTEP_NETWORK_INTERFACE", "", "IFACE", false},
        {"--hierarchical", "LOCKSTEP_HIERARCHICAL", "auto|0|1", "MODE", false},
        {"--profile", "LOCKSTEP_PROFILE", "", "FILE", false},
    };
    for (const auto& f : table)
      if (!find_knob(f.knob))
        throw Error(fmt::format("lockstep run: flag {} maps to undeclared knob {}; declare it in "
                                "src/base/knobs.cc", f.flag, f.knob));
    return table;
  }();
  return flags;
}

std::string knob_flag_help(const KnobFlag& flag) {
  const Knob* knob = find_knob(flag.knob);
  return fmt::format("{} (sets {}; default {})", knob->help, knob->name,
                     knob->default_value.empty() ? "unset" : knob->default_value);
}

std::vector<std::string> knob_flag_choices(const KnobFlag& flag) {
  std::vector<std::string> out;
  std::string_view rest = flag.choices;
  while (!rest.empty()) {
    auto bar = rest.find('|');
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return out;
}

bool is_declared_knob(std::string_view name) { return find_knob(name) != nullptr; }

bool is_launcher_owned(std::string_view name) {
  static constexpr std::array<std::string_view, 13> kOwned = {
      "LOCKSTEP_RANK",       "LOCKSTEP_SIZE",       "LOCKSTEP_LOCAL_RANK", "LOCKSTEP_LOCAL_SIZE",
      "LOCKSTEP_CROSS_RANK", "LOCKSTEP_CROSS_SIZE", "LOCKSTEP_JOB_ID",     "LOCKSTEP_RENDEZVOUS",
      "LOCKSTEP_SECRET",     "LOCKSTEP_HOST",       "LOCKSTEP_ELASTIC",    "LOCKSTEP_WORKER_ID",
      "LOCKSTEP_ELASTIC_GENERATION"};
  return std::find(kOwned.begin(), kOwned.end(), name) != kOwned.end();
}

}  // namespace lockstep::launcher
