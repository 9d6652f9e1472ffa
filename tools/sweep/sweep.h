// `lockstep sweep`: runs trials of a training command over a search space,
// K at a time, each a `lockstep run -np N` job, and keeps a journal in
// RUN_DIR from which a second start resumes. docs/sweep.md is the user's
// guide (flags, space schema, metrics protocol, journal, ASHA).
//
// Note [Sweep loop]
// One thread polls every 200 ms: it reads the new whole lines of each
// running trial's metrics file, lets the scheduler judge rung epochs (ASHA
// may stop a trial: SIGTERM to its launcher, SIGKILL 5 s later), reaps
// exits, enforces --trial-timeout, starts pending trials on free slots, and
// redraws the progress line. Every decision is journaled before it acts, so
// the journal never claims less than happened; a trial with no "end" event
// is restarted on resume, as a new attempt with a fresh metrics file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::sweep {

struct SweepOptions {
  std::string space_path;
  int trials = 0;  // 0: the grid's size (grid), else required
  int np = 1;
  std::string concurrent = "auto";
  std::string scheduler = "random";  // random | grid | asha
  std::string sampler;  // grid | random; default: grid for the grid scheduler, else random
  std::string metric = "test_accuracy";
  std::string mode = "max";
  int budget_epochs = 0;  // 0: whatever the program runs (asha needs it)
  int min_epochs = 1;
  int eta = 3;
  int grid_points = 3;
  uint64_t seed = 0;
  double trial_timeout = 0;  // seconds, 0: none
  std::string dir;
  int slots = 0;  // this host's slots, 0: its CPUs
  std::string hosts;
  std::string remote_exec;
  bool oversubscribe = false;
  std::vector<std::string> run_args;  // extra `lockstep run` flags
  std::vector<std::string> command;
  std::string lockstep_bin;  // the `lockstep` launcher to run trials with
};

// Runs (or resumes) the sweep; returns the exit status (0 when every trial
// ended, whatever their outcome; 130 when interrupted).
int run_sweep(const SweepOptions& options);

}  // namespace lockstep::sweep
