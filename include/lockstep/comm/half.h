// Scalar conversions between f32 and the 16-bit float formats
// (round-to-nearest-even; NaN stays NaN).
#pragma once

#include <cstdint>
#include <cstring>

namespace lockstep::comm {

inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float f);

}  // namespace lockstep::comm
