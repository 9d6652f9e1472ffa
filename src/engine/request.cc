#include "engine/request.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/collective_traits.h"
#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::engine::detail {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof(T));
}

template <typename T>
T get(const uint8_t*& p, const uint8_t* end) {
  if (static_cast<size_t>(end - p) < sizeof(T))
    throw Error("engine: truncated negotiation message (ranks run different lockstep versions?)");
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

template <typename T>
void put_vector(std::vector<uint8_t>& out, const std::vector<T>& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.size()));
  for (const T& x : v) put<T>(out, x);
}

template <typename T>
std::vector<T> get_vector(const uint8_t*& p, const uint8_t* end) {
  auto n = get<uint32_t>(p, end);
  if (static_cast<size_t>(end - p) < n * sizeof(T))
    throw Error("engine: truncated negotiation message");
  std::vector<T> v(n);
  for (auto& x : v) x = get<T>(p, end);
  return v;
}

// What every rank's validation let through before announcing it: the enums
// name real values and no dimension is negative. Asserted where a request is
// serialized and again where a peer's bytes are decoded, so a blob whose
// field layout drifted between writer and reader stops at the read.
bool well_formed(const Request& r) {
  return static_cast<int>(r.collective) <= static_cast<int>(Collective::kAddProcessSet) &&
         static_cast<int>(r.dtype) < comm::kNumDataTypes &&
         static_cast<int>(r.op) < comm::kNumReduceOps &&
         static_cast<int>(r.memory) <= static_cast<int>(comm::MemoryKind::kCuda) &&
         std::all_of(r.shape.begin(), r.shape.end(), [](int64_t d) { return d >= 0; });
}

std::string describe(const Request& r) {
  return fmt::format("'{}': collective {}, dtype {}, op {}, memory {}, shape [{}]", r.name,
                     static_cast<int>(r.collective), static_cast<int>(r.dtype),
                     static_cast<int>(r.op), static_cast<int>(r.memory), fmt::join(r.shape, ","));
}

}  // namespace

size_t Request::bytes() const {
  return static_cast<size_t>(num_elements(shape)) * comm::dtype_size(dtype);
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) { put<uint32_t>(out, v); }
uint32_t get_u32(const uint8_t*& p, const uint8_t* end) { return get<uint32_t>(p, end); }

void serialize(const Request& r, std::vector<uint8_t>& out) {
  LOCKSTEP_DCHECK(well_formed(r), "negotiation blob: announcing the malformed request {}",
                  describe(r));
  put<uint32_t>(out, static_cast<uint32_t>(r.name.size()));
  out.insert(out.end(), r.name.begin(), r.name.end());
  put<uint8_t>(out, static_cast<uint8_t>(r.collective));
  put<uint8_t>(out, static_cast<uint8_t>(r.dtype));
  put<uint8_t>(out, static_cast<uint8_t>(r.op));
  put<int32_t>(out, r.root);
  put<double>(out, r.prescale);
  put<double>(out, r.postscale);
  put_vector(out, r.shape);
  put_vector(out, r.splits);
  put_vector(out, r.ranks);
  put<uint8_t>(out, static_cast<uint8_t>(r.memory));
}

Request deserialize(const uint8_t*& p, const uint8_t* end) {
  Request r;
  auto len = get<uint32_t>(p, end);
  if (static_cast<size_t>(end - p) < len) throw Error("engine: truncated negotiation message");
  r.name.assign(reinterpret_cast<const char*>(p), len);
  p += len;
  r.collective = static_cast<Collective>(get<uint8_t>(p, end));
  r.dtype = static_cast<DataType>(get<uint8_t>(p, end));
  r.op = static_cast<ReduceOp>(get<uint8_t>(p, end));
  r.root = get<int32_t>(p, end);
  r.prescale = get<double>(p, end);
  r.postscale = get<double>(p, end);
  r.shape = get_vector<int64_t>(p, end);
  r.splits = get_vector<int64_t>(p, end);
  r.ranks = get_vector<int32_t>(p, end);
  r.memory = static_cast<comm::MemoryKind>(get<uint8_t>(p, end));
  LOCKSTEP_DCHECK(well_formed(r),
                  "negotiation blob: decoded the malformed request {} (a field layout that "
                  "serialize() and deserialize() no longer share)",
                  describe(r));
  return r;
}

std::string first_mismatch(const Request& a, const Request& b) {
  if (a.collective != b.collective) return "collective";
  if (a.dtype != b.dtype) return "dtype";
  if (a.memory != b.memory) return "memory";
  const CollectiveTraits& t = traits(a.collective);
  if (t.reduces && a.op != b.op) return "op";
  if (t.has_root && a.root != b.root) return "root";
  if (t.scales && (a.prescale != b.prescale || a.postscale != b.postscale)) return "scale factors";
  if (a.collective == Collective::kAddProcessSet && a.ranks != b.ranks) return "ranks";
  if (t.first_dim_varies) {
    if (a.shape.size() != b.shape.size() || a.shape.empty() ||
        !std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1))
      return "shape";
  } else if (a.shape != b.shape) {
    return "shape";
  }
  return {};
}

std::string field_value(const Request& r, const std::string& field) {
  if (field == "collective") return std::string(collective_name(r.collective));
  if (field == "dtype") return std::string(comm::dtype_name(r.dtype));
  if (field == "memory") return r.memory == comm::MemoryKind::kCuda ? "cuda" : "host";
  if (field == "op") return std::string(comm::reduce_op_name(r.op));
  if (field == "root") return fmt::format("{}", r.root);
  if (field == "scale factors")
    return fmt::format("prescale {} postscale {}", r.prescale, r.postscale);
  if (field == "ranks") return fmt::format("[{}]", fmt::join(r.ranks, ","));
  if (field == "shape") {
    if (traits(r.collective).first_dim_varies && !r.shape.empty()) {
      Shape rest(r.shape.begin() + 1, r.shape.end());
      return fmt::format("[*,{}]", fmt::join(rest, ","));
    }
    return format_shape(r.shape);
  }
  return "?";
}

}  // namespace lockstep::engine::detail
