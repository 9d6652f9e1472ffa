#include "summary/wire.h"

#include <bit>

namespace lockstep::summary::wire {
namespace {

// Little-endian on the wire whatever the host.
void fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

}  // namespace

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, uint32_t field, WireType type) {
  varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void field_varint(std::string& out, uint32_t field, uint64_t v) {
  key(out, field, kVarint);
  varint(out, v);
}

void field_double(std::string& out, uint32_t field, double v) {
  key(out, field, kFixed64);
  fixed(out, std::bit_cast<uint64_t>(v), 8);
}

void field_float(std::string& out, uint32_t field, float v) {
  key(out, field, kFixed32);
  fixed(out, std::bit_cast<uint32_t>(v), 4);
}

void raw_float(std::string& out, float v) { fixed(out, std::bit_cast<uint32_t>(v), 4); }

void field_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  key(out, field, kLengthDelimited);
  varint(out, bytes.size());
  out.append(bytes);
}

}  // namespace lockstep::summary::wire
