// Where each parameter's elements live in ZeRO's flat buckets (pure
// arithmetic, identical on every rank; Note [ZeRO layout] in
// sharded_optimizer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::parallel {

// Elements [param_offset, +length) of parameter `param` (flattened) sit at
// [flat_offset, +length) of their bucket; the owner is flat_offset / shard.
struct ShardPlacement {
  int param = 0;
  int64_t param_offset = 0;
  int64_t flat_offset = 0;
  int64_t length = 0;
};

struct ShardBucket {
  int64_t shard = 0;        // elements per rank; the bucket holds ranks * shard
  std::vector<int> params;  // the parameters in this bucket
  std::vector<ShardPlacement> placements;
  int owner(const ShardPlacement& p) const { return static_cast<int>(p.flat_offset / shard); }
};

// Parameters (element counts, all of `element_size` bytes) grouped into
// buckets of about `bucket_bytes`, last parameter first (the order backward
// produces gradients). Element granularity cuts the concatenation into
// `ranks` equal shards (padding the last); whole_tensors assigns each
// parameter to one rank, largest first to the rank with the fewest elements
// so far (over all buckets, so the optimizer state balances), and pads every
// rank's segment of a bucket to the largest. Parameters with no elements are left out.
std::vector<ShardBucket> plan_shards(const std::vector<int64_t>& numels, size_t element_size,
                                     size_t bucket_bytes, int ranks, bool whole_tensors);

}  // namespace lockstep::parallel
