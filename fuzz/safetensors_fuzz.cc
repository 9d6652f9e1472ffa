// A safetensors file from anywhere (a model hub, another framework): any bytes
// must either parse into entries or raise lockstep::Error, never crash or
// allocate what the file does not hold; what parses must re-serialize into a
// file that parses to the same tensors (names, dtypes, shapes, bytes) and
// metadata.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/base/safetensors.h"

namespace {

using lockstep::SafetensorsHeader;

std::string_view bytes_of(const SafetensorsHeader& h, size_t i, const uint8_t* file) {
  const auto& e = h.entries[i];
  return {reinterpret_cast<const char*>(file) + h.data_start + e.begin, e.end - e.begin};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsHeader header;
  try {
    header = lockstep::parse_safetensors_header(data, size);
  } catch (const lockstep::Error&) {
    return 0;
  }
  std::vector<lockstep::SafetensorsView> views;
  for (size_t i = 0; i < header.entries.size(); ++i) {
    const auto& e = header.entries[i];
    std::string_view bytes = bytes_of(header, i, data);
    views.push_back({e.name, e.dtype, e.shape, bytes.data(), bytes.size()});
  }
  // A parsed header is always writable: no throw allowed here.
  std::string again = lockstep::serialize_safetensors(views, header.metadata);
  const auto* again_data = reinterpret_cast<const uint8_t*>(again.data());
  SafetensorsHeader back = lockstep::parse_safetensors_header(again_data, again.size());
  if (back.metadata != header.metadata || back.entries.size() != header.entries.size())
    __builtin_trap();
  if (back.data_start % 8 != 0) __builtin_trap();
  for (size_t i = 0; i < back.entries.size(); ++i) {
    const auto &a = header.entries[i], &b = back.entries[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape) __builtin_trap();
    if (bytes_of(header, i, data) != bytes_of(back, i, again_data)) __builtin_trap();
  }
  return 0;
}
