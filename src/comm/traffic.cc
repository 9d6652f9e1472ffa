#include "lockstep/comm/traffic.h"

#include <array>
#include <atomic>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/policy/policies.h"

namespace lockstep::comm {
namespace {

std::atomic<uint64_t> g_calls{0};
std::atomic<uint64_t> g_payload{0};
std::atomic<uint64_t> g_wire{0};

constexpr std::array<std::string_view, 5> kSegmentAlgorithms = {"one_step", "two_step", "two_level",
                                                                "broadcast", "barrier"};
struct SegmentCounters {
  std::atomic<uint64_t> calls{0}, read{0}, written{0}, cross{0};
};
std::array<SegmentCounters, kSegmentAlgorithms.size()> g_segment;

SegmentCounters& segment_counters(std::string_view algorithm) {
  for (size_t i = 0; i < kSegmentAlgorithms.size(); ++i)
    if (kSegmentAlgorithms[i] == algorithm) return g_segment[i];
  throw InvalidArgument(fmt::format(
      "segment traffic: unknown algorithm '{}' (one_step two_step two_level broadcast barrier)",
      algorithm));
}

}  // namespace

Traffic traffic() {
  return {g_calls.load(std::memory_order_relaxed), g_payload.load(std::memory_order_relaxed),
          g_wire.load(std::memory_order_relaxed)};
}

SegmentTraffic segment_traffic(std::string_view algorithm) {
  const SegmentCounters& c = segment_counters(algorithm);
  return {c.calls.load(std::memory_order_relaxed), c.read.load(std::memory_order_relaxed),
          c.written.load(std::memory_order_relaxed), c.cross.load(std::memory_order_relaxed)};
}

namespace detail {
void count_segment(std::string_view algorithm, uint64_t read_bytes, uint64_t written_bytes,
                   uint64_t cross_node_read_bytes) {
  SegmentCounters& c = segment_counters(algorithm);
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.read.fetch_add(read_bytes, std::memory_order_relaxed);
  c.written.fetch_add(written_bytes, std::memory_order_relaxed);
  c.cross.fetch_add(cross_node_read_bytes, std::memory_order_relaxed);
}

void count_traffic(uint64_t payload_bytes, uint64_t wire_bytes) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_payload.fetch_add(payload_bytes, std::memory_order_relaxed);
  g_wire.fetch_add(wire_bytes, std::memory_order_relaxed);
}
}  // namespace detail

// Note [Wire bytes]
// What one rank sends in the bandwidth-optimal algorithm for each collective
// (Thakur, Rabenseifner & Gropp 2005; the busBw convention of nccl-tests):
//   allreduce       ring reduce-scatter + allgather      2(n-1)/n * B
//   reduce_scatter  ring                                  (n-1)/n * B  (B = whole input)
//   reduce          reduce-scatter + gather to the root   (n-1)/n * B
//   broadcast       pipelined chain from the root          B, except the chain's last rank
//   allgather(v)    ring: every block but the successor's  sum(blocks) - block[next]
//   alltoall(v)     direct                                 sum of blocks to other ranks
//   send            B;  recv, barrier: 0
// Averaged over ranks these give the textbook per-rank totals.
namespace wire {

uint64_t allreduce(uint64_t bytes, int size) {
  return static_cast<uint64_t>(policy::allreduce_wire_bytes(static_cast<int64_t>(bytes), size));
}

uint64_t reduce_scatter(uint64_t bytes, int size) {
  return size <= 1 ? 0 : bytes * static_cast<uint64_t>(size - 1) / static_cast<uint64_t>(size);
}

uint64_t reduce(uint64_t bytes, int size) { return reduce_scatter(bytes, size); }

uint64_t broadcast(uint64_t bytes, int rank, int root, int size) {
  if (size <= 1) return 0;
  const int position = (rank - root + size) % size;  // along the chain
  return position == size - 1 ? 0 : bytes;
}

uint64_t allgatherv(std::span<const size_t> block_bytes, int rank) {
  const size_t n = block_bytes.size();
  if (n <= 1) return 0;
  uint64_t total = 0;
  for (size_t b : block_bytes) total += b;
  return total - block_bytes[(static_cast<size_t>(rank) + 1) % n];
}

uint64_t alltoallv(std::span<const size_t> send_bytes, int rank) {
  uint64_t total = 0;
  for (size_t i = 0; i < send_bytes.size(); ++i)
    if (static_cast<int>(i) != rank) total += send_bytes[i];
  return total;
}

}  // namespace wire
}  // namespace lockstep::comm
