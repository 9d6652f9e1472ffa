// Internal: helpers shared by the default (derived) collectives of Backend.
#pragma once

#include <cstddef>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

namespace lockstep::comm::derived {

inline const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
inline std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

inline void copy(void* dst, const void* src, size_t n) {
  if (n && dst != src) std::memmove(dst, src, n);
}

inline size_t total(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

}  // namespace lockstep::comm::derived
