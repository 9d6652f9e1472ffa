// Request: what one rank asks for under one name, as exchanged during
// negotiation. Serialized into the uncached-announcement blob (wire.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/engine/types.h"

namespace lockstep::engine::detail {

struct Request {
  std::string name;
  Collective collective = Collective::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  Shape shape;
  std::vector<int64_t> splits;                        // alltoall only
  std::vector<int32_t> ranks;                         // add_process_set only
  comm::MemoryKind memory = comm::MemoryKind::kHost;  // where the buffers live

  size_t bytes() const;  // of the input
  bool operator==(const Request&) const = default;
};

// Appends / reads one request; read throws Error on a truncated buffer.
void serialize(const Request& r, std::vector<uint8_t>& out);
Request deserialize(const uint8_t*& p, const uint8_t* end);

void put_u32(std::vector<uint8_t>& out, uint32_t v);
uint32_t get_u32(const uint8_t*& p, const uint8_t* end);

// Fields that every member must agree on, for allgather except the first
// dimension and for alltoall except the splits. Returns the first differing
// field's name ("shape", "dtype", ...) or an empty string when compatible.
std::string first_mismatch(const Request& a, const Request& b);
// The value of that field in `r`, for error messages: "[10,128]", "f32".
std::string field_value(const Request& r, const std::string& field);

}  // namespace lockstep::engine::detail
