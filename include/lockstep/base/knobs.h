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

namespace lockstep {

struct Knob {
  std::string_view name;           // environment variable, e.g. LOCKSTEP_TIMEOUT
  std::string_view default_value;  // as it would be written in the environment
  std::string_view help;           // one line: what it does, units
};

std::span<const Knob> all_knobs();

// The knob's value: the environment's if set, else the default. Throws
// InvalidArgument for an undeclared name or a value that does not parse.
std::string knob_string(std::string_view name);
int64_t knob_int(std::string_view name);
double knob_double(std::string_view name);
bool knob_bool(std::string_view name);
// True when the environment sets the knob (to any value, even its default).
// Throws InvalidArgument for an undeclared name.
bool knob_is_set(std::string_view name);

// Parses sizes such as "64MiB", "8B", "1k", "2G" (binary multiples for KiB/MiB,
// K/M/G too). Throws InvalidArgument naming `what` on bad input.
uint64_t parse_bytes(std::string_view text, std::string_view what);

}  // namespace lockstep
