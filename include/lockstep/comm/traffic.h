// Traffic counters: what this process's communicators were asked to move.
//
// Every Communicator call (the engine's negotiation included) adds to
// process-wide counters. Two measures per call, for this rank:
//   payload: the bytes this rank hands to the call (its send buffer);
//   wire:    the bytes this rank sends under the bandwidth-optimal algorithm
//            for that collective on n ranks (Note [Wire bytes] in traffic.cc),
//            e.g. 2(n-1)/n * B for an allreduce of B bytes.
// So a strategy's "bytes sent per step" is the sum over the collectives the
// engine really ran (their real sizes, fusion, padding and control traffic
// included), each costed the way a network would carry it. What the shared-
// memory transport copies internally differs by algorithm (docs/shm.md).
//
// Thread-safety: the counters are atomics; any thread may read or add.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace lockstep::comm {

struct Traffic {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  uint64_t wire_bytes = 0;

  Traffic operator-(const Traffic& other) const {
    return {calls - other.calls, payload_bytes - other.payload_bytes,
            wire_bytes - other.wire_bytes};
  }
};

// Monotonic since the process started.
Traffic traffic();

// Per-call wire bytes, exposed for tests and for closed forms that must use
// the same conventions. `rank`/`size` are the communicator's, `bytes` this
// rank's payload (reduce_scatter: the whole input; allgather: own block).
namespace wire {
uint64_t allreduce(uint64_t bytes, int size);
uint64_t reduce_scatter(uint64_t bytes, int size);
uint64_t reduce(uint64_t bytes, int size);
uint64_t broadcast(uint64_t bytes, int rank, int root, int size);
uint64_t allgatherv(std::span<const size_t> block_bytes, int rank);
uint64_t alltoallv(std::span<const size_t> send_bytes, int rank);
}  // namespace wire

// What the shared-memory transport moved through its segment: bytes this
// process read from and wrote to shared memory (peers' staging included, its
// private buffers excluded), per algorithm: "one_step", "two_step",
// "two_level" (allreduce and reduce, plan/shm_algorithm.h), "broadcast",
// "barrier"; cross_node_read_bytes is the part of read_bytes staged by ranks
// of another node group (LOCKSTEP_SHM_NODES; 0 without groups). The closed forms
// are policy::shm_allreduce_bytes and policy::shm_broadcast_bytes; tests compare
// the two. Throws InvalidArgument for another name.
struct SegmentTraffic {
  uint64_t calls = 0;
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  uint64_t cross_node_read_bytes = 0;
  SegmentTraffic operator-(const SegmentTraffic& o) const {
    return {calls - o.calls, read_bytes - o.read_bytes, written_bytes - o.written_bytes,
            cross_node_read_bytes - o.cross_node_read_bytes};
  }
};
SegmentTraffic segment_traffic(std::string_view algorithm);

namespace detail {
void count_traffic(uint64_t payload_bytes, uint64_t wire_bytes);
void count_segment(std::string_view algorithm, uint64_t read_bytes, uint64_t written_bytes,
                   uint64_t cross_node_read_bytes = 0);
}  // namespace detail

}  // namespace lockstep::comm
