#include "lockstep/base/protowire.h"

#include <bit>
#include <cstring>

namespace lockstep::protowire {
namespace {

// Little-endian on the wire whatever the host.
void fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

uint64_t read_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
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

bool Reader::varint(uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
    uint8_t byte = static_cast<uint8_t>(*p_++);
    *v |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

bool Reader::tag(uint32_t* field, uint32_t* wire) {
  uint64_t v;
  if (!varint(&v) || (v >> 3) == 0 || (v >> 3) > 0x1fffffff) return false;
  *field = static_cast<uint32_t>(v >> 3);
  *wire = static_cast<uint32_t>(v & 7);
  return true;
}

bool Reader::bytes(std::string_view* out) {
  uint64_t n;
  if (!varint(&n) || n > uint64_t(end_ - p_)) return false;
  *out = std::string_view(p_, n);
  p_ += n;
  return true;
}

bool Reader::fixed32(uint32_t* v) {
  if (size_t(end_ - p_) < 4) return false;
  *v = static_cast<uint32_t>(read_le(p_, 4));
  p_ += 4;
  return true;
}

bool Reader::fixed64(uint64_t* v) {
  if (size_t(end_ - p_) < 8) return false;
  *v = read_le(p_, 8);
  p_ += 8;
  return true;
}

bool Reader::skip(uint32_t wire) {
  uint64_t v;
  std::string_view s;
  switch (wire) {
    case kVarint: return varint(&v);
    case kFixed64: return advance(8);
    case kLengthDelimited: return bytes(&s);
    case kFixed32: return advance(4);
    default: return false;  // groups (3, 4) and the unused 6, 7
  }
}

bool Reader::advance(size_t n) {
  if (size_t(end_ - p_) < n) return false;
  p_ += n;
  return true;
}

}  // namespace lockstep::protowire
