// The flags of `lockstep run` that only set a LOCKSTEP_* knob for the workers.
// One table (knob_flags.cc) maps flag to knob, so the flag's help text, its
// accepted values and the variable it sets all come from one place and the
// knob must exist in src/base/knobs.cc. Internal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lockstep::launcher {

struct KnobFlag {
  std::string_view flag;  // e.g. "--backend"
  std::string_view knob;  // e.g. "LOCKSTEP_BACKEND"; its choices come from the knob table
  std::string_view value_name;
  bool positive_number = false;  // seconds: a number > 0
  bool count_or_auto = false;    // a whole number >= 1, or "auto"
};

const std::vector<KnobFlag>& knob_flags();
// The flag's help: the knob's own doc line plus the variable it sets.
std::string knob_flag_help(const KnobFlag& flag);
std::vector<std::string> knob_flag_choices(const KnobFlag& flag);
// Whether `name` is declared in the knob table.
bool is_declared_knob(std::string_view name);
// Knobs `lockstep run` sets per worker itself (owner kLauncher in the knob
// table); -x may not override them.
bool is_launcher_owned(std::string_view name);

}  // namespace lockstep::launcher
