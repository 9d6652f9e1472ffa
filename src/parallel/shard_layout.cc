#include "parallel/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::parallel {
namespace {

std::vector<std::vector<int>> group_into_buckets(const std::vector<int64_t>& numels,
                                                 size_t element_size, size_t bucket_bytes) {
  std::vector<std::vector<int>> buckets;
  size_t bytes = 0;
  for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) {
    if (numels[p] == 0) continue;
    const size_t size = static_cast<size_t>(numels[p]) * element_size;
    if (buckets.empty() || (bytes > 0 && bytes + size > bucket_bytes)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(p);
    bytes += size;
  }
  return buckets;
}

ShardBucket split_elements(const std::vector<int64_t>& numels, std::vector<int> params, int ranks) {
  ShardBucket b;
  int64_t total = 0;
  for (int p : params) total += numels[p];
  b.shard = (total + ranks - 1) / ranks;
  int64_t flat = 0;
  for (int p : params) {
    for (int64_t done = 0; done < numels[p];) {
      const int64_t room = b.shard - flat % b.shard;  // up to the next owner's boundary
      const int64_t length = std::min(room, numels[p] - done);
      // A placement never straddles two owners' shards (ShardBucket::owner
      // reads its first element only).
      LOCKSTEP_DCHECK_EQ(flat / b.shard, (flat + length - 1) / b.shard,
                         "ZeRO layout: parameter {} at {} straddles a shard boundary", p, flat);
      b.placements.push_back({p, done, flat, length});
      done += length;
      flat += length;
    }
  }
  LOCKSTEP_DCHECK_LE(flat, ranks * b.shard, "ZeRO layout: the bucket overflows its shards");
  b.params = std::move(params);
  return b;
}

ShardBucket assign_tensors(const std::vector<int64_t>& numels, std::vector<int> params, int ranks,
                           std::vector<int64_t>& global_load) {
  std::vector<int64_t> load(ranks, 0);
  std::vector<int> owner(numels.size(), -1);
  std::vector<int> by_size = params;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return numels[a] > numels[b]; });
  for (int p : by_size) {
    int best = 0;
    for (int r = 1; r < ranks; ++r)
      if (std::tie(global_load[r], load[r]) < std::tie(global_load[best], load[best])) best = r;
    owner[p] = best;
    load[best] += numels[p];
    global_load[best] += numels[p];
  }
  ShardBucket b;
  b.shard = *std::max_element(load.begin(), load.end());
  std::vector<int64_t> next(ranks);
  for (int r = 0; r < ranks; ++r) next[r] = r * b.shard;
  for (int p : params) {
    b.placements.push_back({p, 0, next[owner[p]], numels[p]});
    next[owner[p]] += numels[p];
    LOCKSTEP_DCHECK_LE(next[owner[p]], (owner[p] + 1) * b.shard,
                       "ZeRO layout: rank {}'s parameters overflow its shard", owner[p]);
  }
  b.params = std::move(params);
  return b;
}

}  // namespace

std::vector<ShardBucket> plan_shards(const std::vector<int64_t>& numels, size_t element_size,
                                     size_t bucket_bytes, int ranks, bool whole_tensors) {
  if (ranks < 1) throw InvalidArgument(fmt::format("plan_shards: {} ranks", ranks));
  if (bucket_bytes == 0) throw InvalidArgument("ShardedOptimizer: bucket_bytes must be > 0");
  std::vector<ShardBucket> out;
  std::vector<int64_t> global_load(ranks, 0);
  for (auto& params : group_into_buckets(numels, element_size, bucket_bytes))
    out.push_back(whole_tensors ? assign_tensors(numels, std::move(params), ranks, global_load)
                                : split_elements(numels, std::move(params), ranks));
  return out;
}

}  // namespace lockstep::parallel
