#include "engine/fusion.h"

#include "engine/collective_traits.h"

namespace lockstep::engine::detail {
namespace {

bool fusible(const ReadyItem& item) {
  return item.error_kind == ItemError::kNone && traits(item.request.collective).fusible;
}

bool same_key(const Request& a, const Request& b) {
  return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.memory == b.memory;
}

}  // namespace

std::vector<Batch> plan_batches(const std::vector<ReadyItem>& ready, size_t threshold) {
  std::vector<Batch> batches;
  std::vector<bool> taken(ready.size(), false);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    Batch batch;
    batch.items.push_back(i);
    if (fusible(ready[i])) {
      batch.bytes = ready[i].request.bytes();
      const size_t largest = largest_fused_tensor(threshold);
      const bool packs = batch.bytes <= largest;
      // Look past items of other kinds so interleaved dtypes still fuse.
      for (size_t j = i + 1; packs && j < ready.size() && batch.bytes < threshold; ++j) {
        if (taken[j] || !fusible(ready[j]) || !same_key(ready[i].request, ready[j].request))
          continue;
        size_t b = ready[j].request.bytes();
        if (b > largest || batch.bytes + b > threshold) continue;
        batch.bytes += b;
        batch.items.push_back(j);
        taken[j] = true;
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace lockstep::engine::detail
