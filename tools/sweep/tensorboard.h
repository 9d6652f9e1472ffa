// The sweep's TensorBoard records (docs/sweep.md, "TensorBoard"): the
// HParams plugin's experiment in RUN_DIR (the top run: every
// hyper-parameter with its domain, and the metrics), and per trial, in
// RUN_DIR/trials/NNN (the trial's run), its session: the hyper-parameter
// values when it starts, the sweep's metric per epoch as the scalar
// "sweep/<metric>" (what the HParams tab ranks), and at the end its status
// and "sweep/epochs". The trial program's own event files, if it writes
// any into the same directory (the main job's --run-dir), join that run.
//
// Not thread-safe (the sweep loop owns it). Owns one event file per trial
// running in this sweep process.
#pragma once

#include <map>
#include <string>

#include "lockstep/summary/event_writer.h"
#include "tools/sweep/space.h"
#include "tools/sweep/trial.h"

namespace lockstep::sweep {

class SweepEvents {
 public:
  // Writes the experiment: `description` is markdown (the command line,
  // scheduler and metric).
  SweepEvents(const std::string& dir, const Space& space, const std::string& metric,
              const std::string& description);

  void started(const Trial& t);
  void reported(const Trial& t, int epoch, double value);
  void ended(const Trial& t);

  std::string metric_tag() const { return "sweep/" + metric_; }

 private:
  std::string metric_;
  summary::EventWriter top_;
  std::map<int, summary::EventWriter> trials_;  // by trial id, while running
};

}  // namespace lockstep::sweep
