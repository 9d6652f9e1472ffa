// Asynchronous successive halving (Li et al., "A System for Massively
// Parallel Hyperparameter Tuning", 2020), in its stopping form as in Ray
// Tune's ASHA and Optuna's SuccessiveHalvingPruner: trials run on and are
// judged when they reach a rung instead of being paused and resumed.
//
// Note [ASHA rungs]
// Rung k sits at min_epochs · eta^k epochs, for every such value below
// max_epochs (the last epoch is the full budget, not a rung). When a trial
// reports the metric for a rung's epoch, its value joins that rung's record
// and is compared with every value recorded there so far (its own
// included): with n values, the trial continues if it is among the best
// max(1, floor(n / eta)) of them, and is stopped otherwise. Ties continue.
// Early trials therefore compete with few others (the first trial at a rung
// always continues), later ones with more: the asynchronous trade-off that
// lets no worker wait for a rung to fill.
//
// Thread-compatible: one owner (the sweep loop) calls it.
#pragma once

#include <map>
#include <vector>

namespace lockstep::sweep {

enum class Mode { kMax, kMin };

enum class RungDecision { kNotARung, kContinue, kStop };

struct RungRecord {
  int trial = 0;
  double value = 0;
};

class Asha {
 public:
  // min_epochs >= 1, eta >= 2, max_epochs >= min_epochs.
  Asha(int min_epochs, int eta, int max_epochs, Mode mode);

  const std::vector<int>& rungs() const { return rungs_; }  // epochs, ascending
  int rung_of(int epoch) const;  // index, or -1 when `epoch` is not a rung

  // A trial reported `value` at the end of `epoch`. Records it when the
  // epoch is a rung and decides; a trial reports each rung once.
  RungDecision report(int trial, int epoch, double value);

  // Replays a recorded decision (resume): records without deciding.
  void restore(int trial, int rung, double value);

  const std::vector<RungRecord>& records(int rung) const;

  // The decision rule alone: is `value` among the best max(1, n / eta) of
  // `competing` (which holds `value` too)?
  static bool promotable(double value, std::vector<double> competing, int eta, Mode mode);

 private:
  int eta_;
  Mode mode_;
  std::vector<int> rungs_;
  std::map<int, std::vector<RungRecord>> records_;
};

}  // namespace lockstep::sweep
