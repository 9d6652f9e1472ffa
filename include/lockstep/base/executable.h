// Where this process's executable lives (/proc/self/exe). The launcher
// starts the same binary on remote hosts, and the `lockstep` tools find their
// sibling binaries (`lockstep-<command>`) and installed assets beside it.
// Stateless and thread-safe: each call reads the link afresh.
#pragma once

#include <string>

namespace lockstep {

// The absolute path of this executable; throws lockstep::Error naming
// /proc/self/exe when the link cannot be read.
std::string executable_path();

// The folder holding it, or "." when the link cannot be read (a tool then
// looks for its siblings in the working directory).
std::string executable_dir();

}  // namespace lockstep
