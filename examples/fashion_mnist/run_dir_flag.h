// `--run-dir DIR` for the main job: one flag that fills in what
// `lockstep report` reads (docs/report.md). Rank 0 writes DIR/run.json
// (kind "train", the command line); --metrics defaults to DIR/metrics.jsonl,
// --timeline to DIR/timeline.json and --tensorboard to DIR (the event
// files) unless given explicitly. Kept apart
// from main.cc so the training program stays about training.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/run_dir.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::examples {

inline void add_run_dir_flag(CLI::App& app, std::string& dir) {
  app.add_option("--run-dir", dir,
                 "write run.json, metrics.jsonl, timeline.json and TensorBoard event files there "
                 "for `lockstep report` and `tensorboard --logdir` (--metrics/--timeline/"
                 "--tensorboard override the last three)");
}

// Call after lockstep::torch::init() (before it, rank() and size() answer 0
// and 1, and every rank would write) and before training. Only rank 0
// records the run: every rank computes the same paths, and rank 0 is the one
// that writes them.
inline void apply_run_dir(const std::string& dir, std::string& metrics, std::string& timeline,
                          std::string& tensorboard, int argc, char** argv) {
  if (dir.empty()) return;
  if (metrics.empty()) metrics = dir + "/metrics.jsonl";
  if (timeline.empty()) timeline = dir + "/timeline.json";
  if (tensorboard.empty()) tensorboard = dir;
  if (lockstep::torch::rank() != 0) return;
  RunDir(dir, "train", argc, argv,
         {{"metrics", metrics}, {"timeline", timeline}, {"workers", lockstep::torch::size()}});
}

}  // namespace lockstep::examples
