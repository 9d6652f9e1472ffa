#include "engine/autotune.h"

#include <algorithm>

#include "lockstep/base/log.h"

namespace lockstep::engine::detail {

Autotuner::Autotuner(size_t initial_threshold, size_t samples)
    : samples_(std::max<size_t>(samples, 1)), current_(initial_threshold) {
  for (size_t mib : {1, 4, 16, 32, 64, 128}) candidates_.push_back(mib << 20);
  scores_.assign(candidates_.size(), 0.0);
  current_ = candidates_[0];
}

void Autotuner::record(size_t bytes, double seconds) {
  if (converged_ || bytes == 0) return;
  bytes_ += static_cast<double>(bytes);
  seconds_ += seconds;
  if (++seen_ < samples_) return;
  scores_[index_] = seconds_ > 0 ? bytes_ / seconds_ : 0;
  log(LogLevel::kDebug, "autotune: fusion threshold {} MiB: {:.2f} GB/s", candidates_[index_] >> 20,
      scores_[index_] / 1e9);
  next_candidate();
}

void Autotuner::next_candidate() {
  seen_ = 0;
  bytes_ = seconds_ = 0;
  if (++index_ < candidates_.size()) {
    current_ = candidates_[index_];
    return;
  }
  size_t best = std::max_element(scores_.begin(), scores_.end()) - scores_.begin();
  current_ = candidates_[best];
  converged_ = true;
  log(LogLevel::kInfo, "autotune: chose fusion threshold {} MiB ({:.2f} GB/s)", current_ >> 20,
      scores_[best] / 1e9);
}

}  // namespace lockstep::engine::detail
