// What `lockstep report` reads: run directories (docs/report.md) and loose
// files (`lockstep bench --json`, `lockstep plan --json` and `plan validate
// --json` output, metrics JSON lines, a timeline).
// Each input becomes one JSON object the page's script draws; the page
// never reads files itself, so it opens offline from anywhere.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::report {

// {"name", "path", "kind", "run", ...kind-specific fields}. Throws
// lockstep::InvalidArgument naming the path when it is neither a run
// directory nor a file the report knows.
nlohmann::json read_input(const std::string& path);

// Every JSON-object line of a file (torn or foreign lines skipped).
nlohmann::json read_lines(const std::string& path);

}  // namespace lockstep::report
