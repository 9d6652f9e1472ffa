// `lockstep run`: starts the workers of a job and supervises them.
#pragma once

namespace lockstep::launcher {

// Entry point of `lockstep run`; argv[0] is "run". Returns the exit status the
// `lockstep` process should exit with: 0 when every worker exited 0, 2 for bad
// usage, otherwise the first failing worker's code (128 + signal if killed).
int run_main(int argc, char** argv);

}  // namespace lockstep::launcher
