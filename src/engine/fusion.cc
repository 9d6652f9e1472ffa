#include "engine/fusion.h"

#include <algorithm>
#include <cstdint>

#include "engine/collective_traits.h"
#include "lockstep/base/check.h"

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

// The rule itself is policy::fusion_batches (the planner runs the same
// function); here the ready list becomes its items: one key per distinct
// (dtype, op, prescale, postscale), in order of first appearance.
std::vector<Batch> plan_batches(const std::vector<ReadyItem>& ready, size_t threshold) {
  std::vector<policy::FusionItem> items(ready.size());
  std::vector<size_t> key_owner;  // the first item of each key
  for (size_t i = 0; i < ready.size(); ++i) {
    items[i].bytes = static_cast<int64_t>(ready[i].request.bytes());
    items[i].fusible = fusible(ready[i]);
    if (!items[i].fusible) continue;
    size_t k = 0;
    while (k < key_owner.size() && !same_key(ready[key_owner[k]].request, ready[i].request)) ++k;
    if (k == key_owner.size()) key_owner.push_back(i);
    items[i].key = static_cast<int>(k);
  }
  std::vector<Batch> batches;
  const auto limit = static_cast<int64_t>(std::min<size_t>(threshold, INT64_MAX));
  for (auto& members : policy::fusion_batches(items, limit)) {
    Batch batch;
    if (items[members.front()].fusible)
      for (size_t m = 0; m < members.size(); ++m) {
        // One fused buffer holds one (dtype, op, scale) key, members in the
        // agreed order: the executor lays them out by these indices.
        LOCKSTEP_DCHECK(
            items[members[m]].fusible && items[members[m]].key == items[members.front()].key &&
                (m == 0 || members[m] > members[m - 1]),
            "fusion: ready item {} breaks the key or the order of its batch", members[m]);
        batch.bytes += static_cast<size_t>(items[members[m]].bytes);
      }
    batch.items = std::move(members);
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace lockstep::engine::detail
