// Protocol-buffer wire format, both ways, without protobuf: what the
// summary layer writes to TensorBoard (Event, Summary, the HParams plugin's
// records) and the data layer reads of tf.train.Example records. A field is
// a key (field number << 3 | wire type) as a varint, then a varint, 8 or 4
// little-endian bytes, or a varint length and that many bytes.
// https://protobuf.dev/programming-guides/encoding/
//
// The writers are pure functions appending to a string; a Reader is a
// cursor over bytes it does not own, every read bounds-checked (false on
// malformed input, never past the end). Thread-safe on distinct objects.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::protowire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// ---- writing
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

// ---- reading
class Reader {
 public:
  explicit Reader(std::string_view data) : p_(data.data()), end_(data.data() + data.size()) {}
  bool done() const { return p_ == end_; }
  bool varint(uint64_t* v);
  // A key: field number (1 .. 2^29-1) and wire type.
  bool tag(uint32_t* field, uint32_t* wire);
  // A length-delimited value (a view into the data).
  bool bytes(std::string_view* out);
  bool fixed32(uint32_t* v);
  bool fixed64(uint64_t* v);
  // Skips one value of `wire` type (groups are refused: false).
  bool skip(uint32_t wire);

 private:
  bool advance(size_t n);
  const char* p_;
  const char* end_;
};

}  // namespace lockstep::protowire
