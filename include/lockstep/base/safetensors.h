// safetensors files (Hugging Face's weight format), without LibTorch: the
// header parser every loader trusts and the writer every saver uses. The
// LibTorch adapter is lockstep/torch/safetensors.h; the format, what is
// refused and the sharded layout are in docs/interop.md ("safetensors").
//
// Note [safetensors layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
//   bytes [0, 8)        N, a little-endian u64: the header's length
//   bytes [8, 8+N)      a JSON object {name: {"dtype": "F32", "shape": [2, 3],
//                       "data_offsets": [begin, end]}, ..., "__metadata__":
//                       {string: string}} (metadata optional), padded with
//                       spaces so that 8+N is a multiple of 8 (the writer
//                       pads; the reader does not insist)
//   bytes [8+N, size)   the data: each tensor packed, row-major, little-endian,
//                       at [8+N+begin, 8+N+end)
// The parser refuses, before anything is allocated for data: N over 100 MB
// or past the end of the file, a header that is not a JSON object, missing
// or mistyped fields, dtypes outside SafetensorsDtype (by name), negative or
// overflowing shapes, duplicate names or keys, end < begin, a span that is
// not shape x dtype size, and spans that do not tile the data exactly (an
// overlap, a hole or bytes after the last tensor: the reference
// implementation refuses non-contiguous coverage too). Every span is
// therefore inside the file, and the tensors' bytes add up to its data.
//
// Stateless functions; thread-safe. Nothing here owns tensor data: views
// point at the caller's bytes, which must outlive the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

enum class SafetensorsDtype : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
inline constexpr int kSafetensorsDtypeCount = 10;

// "F32", "BF16", "BOOL"...: the names the header uses.
std::string_view safetensors_dtype_name(SafetensorsDtype dtype);
size_t safetensors_dtype_size(SafetensorsDtype dtype);
// nullopt for a name outside the enum (U16, F8_E4M3, "float32"...).
std::optional<SafetensorsDtype> safetensors_dtype_from_name(std::string_view name);
// Elements x element size; nullopt for a negative dimension or an overflow.
std::optional<uint64_t> safetensors_span_bytes(SafetensorsDtype dtype,
                                               const std::vector<int64_t>& shape);

// The largest header parse_safetensors_header accepts, as the reference does.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor of a file. [begin, end) is relative to the data's start.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape{};  // [] is a scalar (one element)
  uint64_t begin = 0;
  uint64_t end = 0;
  bool operator==(const SafetensorsEntry&) const = default;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where begin = 0 lies in the file
};

// Parses a whole file held in memory: data[0, file_size).
// Throws lockstep::Error naming the problem (and the tensor, where one is).
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t file_size);

// The same in two steps, for a file read from disk header first:
// the header length N from the first 8 bytes (refused over 100 MB or past
// `file_size`, which must be at least 8), then the N bytes of JSON checked
// against a file of `file_size` bytes.
uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size);
SafetensorsHeader parse_safetensors_json(std::string_view header, uint64_t file_size);

// Reads and checks only the header of the open file `fd` (its size from
// fstat); `path` names it in errors. Reads at most 8 + N bytes.
SafetensorsHeader read_safetensors_header(int fd, const std::string& path);

// A tensor to write: `data` holds `bytes` = elements x dtype size bytes,
// row-major, little-endian.
struct SafetensorsView {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape{};
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// Where each tensor goes, decided before any data is written. The header
// lists tensors in the caller's order; their data is laid out by decreasing
// element size (stable), so every tensor starts at a multiple of its own
// element size in the file, as zero-copy readers want.
struct SafetensorsLayout {
  std::string prefix;                     // the 8 length bytes, the JSON, the padding
  std::vector<SafetensorsEntry> entries;  // the caller's order, with offsets
  std::vector<size_t> data_order;         // entry indices in the order their data follows
  uint64_t file_size = 0;
};

// `entries` carry name, dtype and shape (offsets ignored). Throws
// lockstep::InvalidArgument on a duplicate or reserved name ("__metadata__"),
// a negative or overflowing shape, or a name or metadata that is not UTF-8.
SafetensorsLayout plan_safetensors(const std::vector<SafetensorsEntry>& entries,
                                   const std::map<std::string, std::string>& metadata);

// The whole file in memory (small files, tests, the fuzz target).
std::string serialize_safetensors(const std::vector<SafetensorsView>& tensors,
                                  const std::map<std::string, std::string>& metadata);

// Streams the file into `fd` (header, then each tensor's bytes): no second
// copy of the data. `path` names it in errors. Does not fsync or close.
void write_safetensors(int fd, const std::string& path, const std::vector<SafetensorsView>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Writes all `size` bytes at the file position of `fd`, retrying short writes
// and EINTR; throws lockstep::Error naming `path` and errno.
void write_all_to_fd(int fd, const void* data, size_t size, const std::string& path);
// Reads exactly `size` bytes at `offset` of `fd` (pread); throws
// lockstep::Error naming `path` on an error or an early end of file.
void read_all_at(int fd, void* data, uint64_t size, uint64_t offset, const std::string& path);

}  // namespace lockstep
