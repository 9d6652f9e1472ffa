// Which records each rank reads in an epoch. Shards are cut into blocks of
// consecutive records (the unit of sequential I/O); the blocks are shuffled
// and each rank gets a list of Segments (a run of records inside one block).
//
// Two schemes, both giving every rank exactly records_per_rank() records, so
// every rank runs the same number of batches (synchronous training needs it):
//  kPartition: the block order is shuffled with (seed, epoch), identical on
//    every rank; the rank takes its contiguous share of that order. The
//    remainder N % world is handled by kPad (ceil(N/world) each, wrapping
//    around to the start: a few records are seen twice) or kDrop
//    (floor(N/world) each, a few records are not seen this epoch).
//  kSample: each rank shuffles the blocks with (seed, epoch, rank) on its own
//    and takes the first records_per_rank() records: ranks sample the whole
//    data set independently (records may repeat across ranks in an epoch).
// Pure functions: thread-safe, deterministic across machines.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep::data {

enum class Assignment { kPartition, kSample };
enum class Remainder { kPad, kDrop };

struct Segment {
  uint32_t shard = 0;
  uint64_t first = 0;  // record index inside the shard
  uint64_t count = 0;
  bool operator==(const Segment&) const = default;
};

struct EpochPlanOptions {
  Assignment assignment = Assignment::kPartition;
  Remainder remainder = Remainder::kPad;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t block_records = 256;  // records per block; bigger = longer sequential reads
};

uint64_t records_per_rank(uint64_t total_records, int world_size, Remainder remainder);

// Segments for options.rank, in reading order. Throws InvalidArgument for a
// rank outside [0, world_size) or block_records == 0.
std::vector<Segment> plan_epoch(const std::vector<uint64_t>& shard_records,
                                const EpochPlanOptions& options);

}  // namespace lockstep::data
