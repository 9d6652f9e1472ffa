#include "comm/kit/op_desc.h"

#include <fmt/format.h>

namespace lockstep::comm::kit {

std::string_view kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kReduce: return "reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgatherv: return "allgather";
    case OpKind::kGatherv: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAlltoallv: return "alltoall";
    case OpKind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

bool reduces(OpKind kind) {
  return kind == OpKind::kAllreduce || kind == OpKind::kReduce || kind == OpKind::kReduceScatter;
}

bool hashes_counts(OpKind kind) { return kind == OpKind::kAllgatherv || kind == OpKind::kGatherv; }

OpDesc make_desc(OpKind kind, DataType dtype, int root, uint64_t count, ReduceOp op) {
  OpDesc d;
  d.kind = kind;
  d.dtype = dtype;
  d.op = reduces(kind) ? static_cast<uint8_t>(op) : 0;
  d.root = root;
  d.count = kind == OpKind::kBarrier || kind == OpKind::kAlltoallv ? 0 : count;
  return d;
}

uint64_t hash_counts(std::span<const size_t> counts) {
  uint64_t h = 1469598103934665603ull;
  for (size_t c : counts) h = (h ^ c) * 1099511628211ull;
  return h;
}

PackedDesc pack(const OpDesc& d) {
  return {uint64_t{static_cast<uint8_t>(d.kind)} | uint64_t{static_cast<uint8_t>(d.dtype)} << 8 |
              uint64_t{d.op} << 16 | uint64_t{d.flags} << 24 |
              uint64_t{static_cast<uint32_t>(d.root)} << 32,
          d.count};
}

OpDesc unpack(const PackedDesc& w) {
  OpDesc d;
  d.kind = static_cast<OpKind>(static_cast<uint8_t>(w[0]));
  d.dtype = static_cast<DataType>(static_cast<uint8_t>(w[0] >> 8));
  d.op = static_cast<uint8_t>(w[0] >> 16);
  d.flags = static_cast<uint8_t>(w[0] >> 24);
  d.root = static_cast<int32_t>(static_cast<uint32_t>(w[0] >> 32));
  d.count = w[1];
  return d;
}

std::string describe(const OpDesc& d) {
  std::string s(kind_name(d.kind));
  if (d.kind == OpKind::kBarrier) return s;
  s += fmt::format(" dtype={}", is_valid(d.dtype) ? dtype_name(d.dtype) : "?");
  if (reduces(d.kind)) {
    auto op = static_cast<ReduceOp>(d.op);
    s += fmt::format(" op={}", is_valid(op) ? reduce_op_name(op) : "?");
  }
  if (d.root >= 0) s += fmt::format(" root={}", d.root);
  if (hashes_counts(d.kind))
    s += fmt::format(" counts-hash={:x}", d.count);
  else if (d.kind != OpKind::kAlltoallv)
    s += fmt::format(" count={}", d.count);
  return s;
}

bool all_equal(std::span<const OpDesc> per_rank) {
  for (const OpDesc& d : per_rank)
    if (!(d == per_rank.front())) return false;
  return true;
}

std::string mismatch_message(std::span<const OpDesc> per_rank) {
  std::string msg = "ranks called different collectives:";
  for (size_t r = 0; r < per_rank.size(); ++r)
    msg += fmt::format(" rank {}: {};", r, describe(per_rank[r]));
  msg.pop_back();
  return msg;
}

}  // namespace lockstep::comm::kit
