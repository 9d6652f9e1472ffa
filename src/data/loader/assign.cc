#include "lockstep/data/assign.h"

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "data/rng.h"

namespace lockstep::data {
namespace {

// Stream tags keep the block shuffle independent of other random choices.
constexpr uint64_t kBlockOrderStream = 0x626c6f636bull;  // "block"

std::vector<Segment> make_blocks(const std::vector<uint64_t>& shard_records, uint64_t block) {
  std::vector<Segment> blocks;
  for (uint32_t s = 0; s < shard_records.size(); ++s)
    for (uint64_t first = 0; first < shard_records[s]; first += block)
      blocks.push_back({s, first, std::min(block, shard_records[s] - first)});
  return blocks;
}

// Appends the segments covering positions [begin, end) of the concatenated
// block order; `starts[i]` is the position where blocks[i] begins.
void append_range(const std::vector<Segment>& blocks, const std::vector<uint64_t>& starts,
                  uint64_t begin, uint64_t end, std::vector<Segment>* out) {
  size_t i =
      static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) -
      1;
  for (uint64_t pos = begin; pos < end; ++i) {
    uint64_t skip = pos - starts[i];
    uint64_t take = std::min(blocks[i].count - skip, end - pos);
    out->push_back({blocks[i].shard, blocks[i].first + skip, take});
    pos += take;
  }
}

}  // namespace

uint64_t records_per_rank(uint64_t total, int world_size, Remainder remainder) {
  uint64_t w = static_cast<uint64_t>(world_size);
  return remainder == Remainder::kPad ? (total + w - 1) / w : total / w;
}

std::vector<Segment> plan_epoch(const std::vector<uint64_t>& shard_records,
                                const EpochPlanOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw InvalidArgument(
        fmt::format("plan_epoch: rank {} outside world of {}", o.rank, o.world_size));
  if (o.block_records == 0) throw InvalidArgument("plan_epoch: block_records must be >= 1");
  std::vector<Segment> blocks = make_blocks(shard_records, o.block_records);
  bool shared = o.assignment == Assignment::kPartition;
  uint64_t seed = shared ? mix_seed({o.seed, o.epoch, kBlockOrderStream})
                         : mix_seed({o.seed, o.epoch, kBlockOrderStream, uint64_t(o.rank) + 1});
  Rng(seed).shuffle(blocks);
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (const auto& b : blocks) {
    starts.push_back(total);
    total += b.count;
  }
  uint64_t per_rank = records_per_rank(total, o.world_size, o.remainder);
  std::vector<Segment> out;
  if (per_rank == 0) return out;
  // per_rank <= total, so a rank's range wraps around the end at most once.
  uint64_t begin = shared ? (uint64_t(o.rank) * per_rank) % total : 0;
  uint64_t first_end = std::min(begin + per_rank, total);
  append_range(blocks, starts, begin, first_end, &out);
  append_range(blocks, starts, 0, per_rank - (first_end - begin), &out);
  return out;
}

}  // namespace lockstep::data
