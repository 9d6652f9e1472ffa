// `lockstep`: launcher, benchmarks and utilities. See `lockstep --help`.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/base/executable.h"
#include "lockstep/comm/transports.h"
#include "lockstep/launcher/launcher.h"
#include "tools/lockstep/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: lockstep <command> [options]

commands:
  run -np N [options] -- PROGRAM ARGS...   start N workers (lockstep run --help)
  bench <collective> [options]             collective benchmark: allreduce, broadcast,
                                           allgather, reduce_scatter, alltoall, barrier
  bench engine|train|data [options]        engine, training and input-pipeline benchmarks
  bench fit --backend shm|gloo|mpi --out F fit the planner's network model (docs/plan.md)
  profile [options] -- PROGRAM ARGS...     record a step profile of a training program
  plan --profile P --network N [options]   predict step time and scaling from 1 to 1024 nodes
  plan validate [options] -- PROGRAM ...   measure here and compare with the prediction
  plan layouts --profile P --network N     rank workers x threads layouts of one host
  convert <format> [options]               write record shards (lockstep convert --help)
  convert checkpoint IN OUT                model weights: lockstep checkpoint, torch.save, safetensors
  sweep --space S.json [options] -- CMD    hyper-parameter search (lockstep sweep --help)
  report INPUT... [-o report.html]         one HTML page of charts from run, sweep, bench
                                           and plan outputs (lockstep report --help)
  config                                   print every LOCKSTEP_* knob with its value
  doctor DIR                               which rank diverged or stalled first, from
                                           the ranks' flight-recorder dumps

Run 'lockstep <command> --help' for the options of a command.
)";

// Runs `lockstep-<name>` from this binary's folder, passing the remaining args.
int exec_sibling(const std::string& name, int argc, char** argv) {
  std::string path = lockstep::executable_dir() + "/lockstep-" + name;
  if (access(path.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "lockstep: unknown command '%s' (no %s). Run 'lockstep --help' for the list.\n",
                 name.c_str(), path.c_str());
    return 2;
  }
  std::vector<char*> args{path.data()};
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "lockstep: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  if (command == "run")
    return lockstep::launcher::run_main(argc - 1, argv + 1, lockstep::comm::transport_names());
  if (command == "remote-worker") return lockstep::launcher::remote_worker_main(argc - 1, argv + 1);
  if (command == "config") return lockstep::cli::config_main(argc - 1, argv + 1);
  if (command == "doctor") return lockstep::cli::doctor_main(argc - 1, argv + 1);
  if (command == "bench") {
    if (argc < 3 || argv[2][0] == '-') {
      std::fputs(kUsage, stderr);
      return 2;
    }
    if (lockstep::cli::is_benchmarkable_collective(argv[2]))
      return lockstep::cli::bench_collective_main(argc - 2, argv + 2);
    return exec_sibling(std::string("bench-") + argv[2], argc - 3, argv + 3);
  }
  return exec_sibling(command, argc - 2, argv + 2);
}
