// The share of wall time spent in collectives, and the collectives that
// took longest, from an engine timeline (Chrome trace; docs/engine.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::report {

// {"span_us", "busy_us" (union of all phases), "phases": {NAME: us},
//  "top": [{"name", "total_us", "collective_us", "count"}] (10 longest)},
// or null when the file is missing or holds no event. A timeline whose
// writer was killed (no closing bracket) is read up to its last whole event.
nlohmann::json summarize_timeline(const std::string& path);

}  // namespace lockstep::report
