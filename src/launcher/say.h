// The supervisor's messages on the launcher's stderr, each one line
// prefixed "lockstep run: ". Internal.
#pragma once

#include <unistd.h>

#include <string>
#include <utility>

#include <fmt/format.h>

#include "launcher/output_relay.h"

namespace lockstep::launcher {

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::string line = "lockstep run: " + fmt::format(format, std::forward<Args>(args)...) + "\n";
  write_fully(STDERR_FILENO, line);
}

}  // namespace lockstep::launcher
