// The shape the `lockstep` tools' entry points share: parse the command line
// (--help exits 0, a bad flag 2 with CLI11's message), run the command, and
// turn what it throws into one line "<command>: <message>" on stderr and an
// exit status: 2 for bad input (lockstep::InvalidArgument), 1 for any other
// lockstep::Error. Header-only; call once from main.
#pragma once

#include <cstdio>
#include <string_view>
#include <utility>

#include <CLI/CLI.hpp>

#include "lockstep/base/error.h"

namespace lockstep::cli {

// `body` returns the exit status of a command that ran.
template <typename Body>
int run_command(CLI::App& app, int argc, char** argv, std::string_view command, Body&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const int width = static_cast<int>(command.size());
  try {
    return std::forward<Body>(body)();
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "%.*s: %s\n", width, command.data(), e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%.*s: %s\n", width, command.data(), e.what());
    return 1;
  }
}

}  // namespace lockstep::cli
