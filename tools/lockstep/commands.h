// Built-in sub-commands of the `lockstep` CLI. Each parses its own arguments
// (argv[0] is the sub-command name) and returns the process exit status:
// 0 success, 1 failure, 2 bad usage.
#pragma once

namespace lockstep::cli {

int config_main(int argc, char** argv);
int doctor_main(int argc, char** argv);            // argv[0] == "doctor"
int bench_collective_main(int argc, char** argv);  // argv[0] == collective name
bool is_benchmarkable_collective(const char* name);

}  // namespace lockstep::cli
