// Argument checks shared by the `lockstep` tools: CLI11 validators whose
// messages state the bound in words (CLI::Range prints a 300-digit range for
// an open-ended double), and parsing that exits 2 with the flag's name on any
// bad value. Header-only; single-threaded use at start-up.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace lockstep::cli {

namespace detail {
inline CLI::Validator bounded(double bound, bool strict, const char* words) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') return fmt::format("'{}' is not a number", text);
        bool ok = strict ? v > bound : v >= bound;
        return ok ? "" : fmt::format("{} must be {} {}", text, words, bound);
      },
      fmt::format("{} {}", strict ? ">" : ">=", bound));
}
}  // namespace detail

// A numeric value strictly above `bound` (e.g. a size multiplier > 1).
inline CLI::Validator greater_than(double bound) {
  return detail::bounded(bound, true, "greater than");
}
// A numeric value at or above `bound` (e.g. at least one step).
inline CLI::Validator at_least(double bound) { return detail::bounded(bound, false, "at least"); }

// Parses argv. Returns nullopt to go on, or the exit status: 0 after --help,
// 2 after a usage error, whose message (naming the flag) went to stderr.
inline std::optional<int> parse_or_status(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace lockstep::cli
