#include "lockstep/policy/policies.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::policy {

OverlapMode parse_overlap(std::string_view text, std::string_view what) {
  if (text.empty() || text == "auto") return OverlapMode::kAuto;
  if (text == "on") return OverlapMode::kOn;
  if (text == "off") return OverlapMode::kOff;
  throw InvalidArgument(fmt::format("{}='{}' is not one of auto, on, off", what, text));
}

OverlapChoice choose_overlap(OverlapMode mode, int ranks, bool one_host, int worker_cpus,
                             int intra_op_threads) {
  if (mode == OverlapMode::kOn) return {true, true};
  if (mode == OverlapMode::kOff || ranks <= 1) return {};
  if (!one_host) return {true, false, "ranks on several hosts"};
  if (worker_cpus <= 0) return {true, false, "the host's cores are not known"};
  const bool pays = overlap_pays(one_host, worker_cpus, intra_op_threads);
  return {pays, false, pays ? "a spare core" : "shared memory and no spare core"};
}

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
