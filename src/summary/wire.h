// Protocol-buffer wire format, encoding only, for the few messages
// lockstep writes to TensorBoard (Event, Summary, TensorProto, the HParams
// plugin's records). Hand-encoded so that no layer links protobuf for it:
// a field is a key (field number << 3 | wire type) as a varint, then a
// varint, 8 or 4 little-endian bytes, or a varint length and that many bytes.
// https://protobuf.dev/programming-guides/encoding/
//
// Pure functions appending to a string: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::summary::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t v);
void key(std::string& out, uint32_t field, WireType type);

// Each appends one field; proto3 defaults are written too (callers skip them).
void field_varint(std::string& out, uint32_t field, uint64_t v);
void field_double(std::string& out, uint32_t field, double v);
void field_float(std::string& out, uint32_t field, float v);
// The 4 bytes of a float with no key: an element of a packed repeated float.
void raw_float(std::string& out, float v);
// Strings, bytes and embedded messages (already serialized).
void field_bytes(std::string& out, uint32_t field, std::string_view bytes);

}  // namespace lockstep::summary::wire
