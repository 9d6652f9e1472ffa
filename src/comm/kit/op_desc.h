// The collective descriptor every transport compares across ranks, its wire
// form and its one formatter.
//
// Before (or while) moving data, a transport makes every rank see every
// other rank's OpDesc: shm through the segment, mpi through a shared window
// or an allgather, gloo through an allgather. When they differ, every rank
// throws MismatchError(mismatch_message(all)) after the same number of steps,
// so the communicator stays usable. Value type; no state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "lockstep/comm/types.h"

namespace lockstep::comm::kit {

// The collectives a Backend implements. Values travel between ranks (wire
// and shared memory): append, never renumber.
enum class OpKind : uint8_t {
  kAllreduce = 1,
  kReduce,
  kBroadcast,
  kAllgatherv,
  kGatherv,
  kScatter,
  kReduceScatter,
  kAlltoallv,
  kBarrier,
};

// The user-facing name ("allreduce", "allgather", "reduce_scatter", ...),
// the same spelling the Communicator API and the engine use.
std::string_view kind_name(OpKind kind);
// True for kinds whose OpDesc::op is a ReduceOp.
bool reduces(OpKind kind);
// True for kinds whose OpDesc::count is hash_counts() of a counts vector.
bool hashes_counts(OpKind kind);

// What one rank says about the collective it is entering. Trivially
// copyable (the shm transport keeps it in shared memory), 16 bytes.
struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  DataType dtype = DataType::kUInt8;
  uint8_t op = 0;      // ReduceOp for reducing kinds, else 0
  uint8_t flags = 0;   // reserved, 0
  int32_t root = -1;   // -1 for rootless kinds
  uint64_t count = 0;  // elements, or hash_counts() (see hashes_counts)
  bool operator==(const OpDesc&) const = default;
};
static_assert(sizeof(OpDesc) == 16 && std::is_trivially_copyable_v<OpDesc>);

// A descriptor with the conventions every transport shares: op 0 unless the
// kind reduces; count 0 for barrier and alltoallv (whose counts are checked
// pairwise instead).
OpDesc make_desc(OpKind kind, DataType dtype, int root, uint64_t count,
                 ReduceOp op = ReduceOp::kSum);
inline OpDesc barrier_desc() { return make_desc(OpKind::kBarrier, DataType::kUInt8, -1, 0); }

// Order-sensitive FNV-1a hash of a counts vector (allgatherv/gatherv).
uint64_t hash_counts(std::span<const size_t> counts);

// Two 64-bit words, for transports that exchange descriptors as integers
// (MPI_UINT64_T, Gloo allgather). unpack(pack(d)) == d.
using PackedDesc = std::array<uint64_t, 2>;
PackedDesc pack(const OpDesc& desc);
OpDesc unpack(const PackedDesc& words);

// "allreduce dtype=f32 op=sum count=100", "barrier", "gather dtype=i64
// root=1 counts-hash=..." — also for descriptors with out-of-range fields.
std::string describe(const OpDesc& desc);

// True when every rank's descriptor equals the first.
bool all_equal(std::span<const OpDesc> per_rank);

// "ranks called different collectives: rank 0: ...; rank 1: ..." with the
// descriptor of every rank, in rank order.
std::string mismatch_message(std::span<const OpDesc> per_rank);

}  // namespace lockstep::comm::kit
