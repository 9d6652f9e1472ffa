// The one table of lockstep's configuration knobs.
//
// Every LOCKSTEP_* environment variable is declared exactly once, in
// src/base/knobs.cc, with its default and a doc string; `lockstep config`
// prints the table and `lockstep run` flags map onto the same names. Reading
// an undeclared knob throws, so a typo cannot silently fall back to a default.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

// Who sets a knob: the user (environment, `lockstep run` flags and -x) or
// `lockstep run` itself, per worker (-x may not override those).
enum KnobOwner : bool { kUser = false, kLauncher = true };

struct Knob {
  std::string_view name;           // environment variable, e.g. LOCKSTEP_TIMEOUT
  std::string_view default_value;  // as it would be written in the environment
  std::string_view help;           // one line: what it does, units
  std::string_view choices = {};   // "a|b|c" when only those values are accepted
  KnobOwner owner = kUser;
};

std::span<const Knob> all_knobs();
// The declared knob; throws InvalidArgument for an undeclared name.
const Knob& knob(std::string_view name);
// `choices` split at '|' (empty for free-form knobs).
std::vector<std::string> knob_choices(const Knob& knob);

// Where a value is read from: the environment (falling back to the
// default), or the table's default alone. Struct defaults are written as
// reads of kDefault, so the table stays the only place a default is stated.
enum class KnobRead { kEnvironment, kDefault };

// The knob's value. Throws InvalidArgument for an undeclared name or a value
// that does not parse (or, for knob_choice, is not one of the choices).
std::string knob_string(std::string_view name, KnobRead from = KnobRead::kEnvironment);
std::string knob_choice(std::string_view name, KnobRead from = KnobRead::kEnvironment);
int64_t knob_int(std::string_view name, KnobRead from = KnobRead::kEnvironment);
double knob_double(std::string_view name, KnobRead from = KnobRead::kEnvironment);
bool knob_bool(std::string_view name, KnobRead from = KnobRead::kEnvironment);
uint64_t knob_bytes(std::string_view name, KnobRead from = KnobRead::kEnvironment);
// True when the environment sets the knob (to any value, even its default).
// Throws InvalidArgument for an undeclared name.
bool knob_is_set(std::string_view name);

// Parses sizes such as "64MiB", "8B", "1k", "2G" (binary multiples for KiB/MiB,
// K/M/G too). Throws InvalidArgument naming `what` on bad input.
uint64_t parse_bytes(std::string_view text, std::string_view what);

}  // namespace lockstep
