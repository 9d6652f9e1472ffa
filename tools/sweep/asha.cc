#include "tools/sweep/asha.h"

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {

Asha::Asha(int min_epochs, int eta, int max_epochs, Mode mode) : eta_(eta), mode_(mode) {
  if (min_epochs < 1)
    throw InvalidArgument(fmt::format("--min-epochs {}: must be at least 1", min_epochs));
  if (eta < 2) throw InvalidArgument(fmt::format("--eta {}: must be at least 2", eta));
  if (max_epochs < min_epochs)
    throw InvalidArgument(
        fmt::format("--budget-epochs {} is below --min-epochs {}", max_epochs, min_epochs));
  for (long r = min_epochs; r < max_epochs; r *= eta) rungs_.push_back(static_cast<int>(r));
}

int Asha::rung_of(int epoch) const {
  auto it = std::find(rungs_.begin(), rungs_.end(), epoch);
  return it == rungs_.end() ? -1 : static_cast<int>(it - rungs_.begin());
}

bool Asha::promotable(double value, std::vector<double> competing, int eta, Mode mode) {
  const size_t keep = std::max<size_t>(1, competing.size() / static_cast<size_t>(eta));
  if (mode == Mode::kMax)
    std::sort(competing.begin(), competing.end(), std::greater<>());
  else
    std::sort(competing.begin(), competing.end());
  const double cutoff = competing[std::min(keep, competing.size()) - 1];
  return mode == Mode::kMax ? value >= cutoff : value <= cutoff;
}

RungDecision Asha::report(int trial, int epoch, double value) {
  const int rung = rung_of(epoch);
  if (rung < 0) return RungDecision::kNotARung;
  auto& rec = records_[rung];
  rec.push_back({trial, value});
  std::vector<double> values;
  for (const auto& r : rec) values.push_back(r.value);
  return promotable(value, values, eta_, mode_) ? RungDecision::kContinue : RungDecision::kStop;
}

void Asha::restore(int trial, int rung, double value) { records_[rung].push_back({trial, value}); }

const std::vector<RungRecord>& Asha::records(int rung) const {
  static const std::vector<RungRecord> kEmpty;
  auto it = records_.find(rung);
  return it == records_.end() ? kEmpty : it->second;
}

}  // namespace lockstep::sweep
