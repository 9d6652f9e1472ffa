#include "lockstep/policy/policies.h"

namespace lockstep::policy {

std::vector<std::vector<size_t>> fusion_batches(const std::vector<FusionItem>& ready,
                                                int64_t threshold) {
  std::vector<std::vector<size_t>> batches;
  std::vector<bool> taken(ready.size(), false);
  const int64_t largest = largest_fused_tensor(threshold);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    std::vector<size_t> batch{i};
    int64_t bytes = ready[i].bytes;
    const bool packs = ready[i].fusible && bytes <= largest;
    // Look past items of other keys so interleaved dtypes still fuse.
    for (size_t j = i + 1; packs && j < ready.size() && bytes < threshold; ++j) {
      if (taken[j] || !ready[j].fusible || ready[j].key != ready[i].key) continue;
      if (ready[j].bytes > largest || bytes + ready[j].bytes > threshold) continue;
      bytes += ready[j].bytes;
      batch.push_back(j);
      taken[j] = true;
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace lockstep::policy
