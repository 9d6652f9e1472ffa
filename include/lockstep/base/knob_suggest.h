// "Did you mean ...?" for a LOCKSTEP_* name that is not in the knob table
// (lockstep/base/knobs.h): the declared knob nearest to it by edit distance,
// when it is near enough to be a typo. Used wherever an unknown knob is
// reported (knob(), `lockstep run -x`). Pure functions over the constant
// table; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace lockstep {

// Edits (insert, delete, substitute, swap two neighbours) turning `a` into
// `b`, ignoring case.
size_t edit_distance(std::string_view a, std::string_view b);

// The declared knob nearest to `name`, if at most 3 edits away and fewer
// than a third of the characters after "LOCKSTEP_" change; empty otherwise
// (and for a declared name).
std::string_view closest_knob(std::string_view name);

// " (did you mean LOCKSTEP_FUSION_THRESHOLD?)", or "" when no knob is near.
std::string did_you_mean(std::string_view name);

}  // namespace lockstep
