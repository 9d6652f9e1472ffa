// The transports built into this library, by name: the values
// LOCKSTEP_BACKEND accepts besides auto (`lockstep config` lists them). The
// registry behind it (Note [Transport registry]) is internal to the comm
// layer. Thread-safe: the table is a constant.
#pragma once

#include <string_view>
#include <vector>

namespace lockstep::comm {

// In registration order; the names are static strings.
std::vector<std::string_view> transport_names();

}  // namespace lockstep::comm
