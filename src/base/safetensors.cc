// The safetensors header parser: Note [safetensors layout] in
// include/lockstep/base/safetensors.h says what is checked and why.
#include "lockstep/base/safetensors.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "base/safetensors_internal.h"
#include "lockstep/base/error.h"

namespace lockstep {
namespace {

// std::map underneath: nlohmann::ordered_json finds keys by a linear scan,
// quadratic for a hostile header of millions of names. The header's order
// is recorded while parsing instead.
using Json = nlohmann::json;

struct DtypeRow {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t size;
};
// One row per enumerator, in enum order.
constexpr std::array<DtypeRow, kSafetensorsDtypeCount> kDtypes{{
    {SafetensorsDtype::F64, "F64", 8},
    {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::F16, "F16", 2},
    {SafetensorsDtype::BF16, "BF16", 2},
    {SafetensorsDtype::I64, "I64", 8},
    {SafetensorsDtype::I32, "I32", 4},
    {SafetensorsDtype::I16, "I16", 2},
    {SafetensorsDtype::I8, "I8", 1},
    {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::BOOL, "BOOL", 1},
}};
static_assert(static_cast<int>(SafetensorsDtype::BOOL) == kSafetensorsDtypeCount - 1);

// Deeper nesting is never a valid header (object > entry > shape array), and
// refusing it in the scan bounds what the parse builds for a hostile header.
constexpr int kMaxDepth = 3;

[[noreturn]] void bad(const std::string& what) {
  throw Error("safetensors: " + what +
              " (the file is corrupt, truncated or not a safetensors file; re-export it)");
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct ParsedHeader {
  Json json;
  std::vector<std::string> names;  // the top-level keys, in the header's order
};

// Note [Header scan]: nlohmann keeps the last of duplicate keys silently (a
// file with two tensors of one name would load whichever it kept), and its
// parser callback, which could see them, rescans the parent after every
// object: quadratic in a header of a million tensors. So a SAX pass first
// refuses duplicates and deep nesting and records the header's order, in
// O(n log n) and without building anything; a plain parse follows.
class HeaderScan final : public nlohmann::json_sax<Json> {
 public:
  std::vector<std::string> names;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    enter();
    open_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!open_.back().insert(key).second)
      bad(fmt::format("duplicate {} {}", depth_ == 1 ? "tensor name" : "key", quote_name(key)));
    if (depth_ == 1) names.push_back(key);
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    enter();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    bad(fmt::format("the header is not JSON ({})", e.what()));
  }

 private:
  void enter() {
    if (++depth_ > kMaxDepth) bad(fmt::format("header nests deeper than {} levels", kMaxDepth));
  }
  int depth_ = 0;
  std::vector<std::set<std::string>> open_;  // keys seen, per open object
};

ParsedHeader parse_json_object(std::string_view header) {
  HeaderScan scan;
  Json::sax_parse(header.begin(), header.end(), &scan);
  ParsedHeader out{.json = {}, .names = std::move(scan.names)};
  try {
    out.json = Json::parse(header.begin(), header.end());
  } catch (const Json::exception& e) {  // the scan accepted it: not expected
    bad(fmt::format("the header is not JSON ({})", e.what()));
  }
  if (!out.json.is_object())
    bad(fmt::format("the header is a JSON {}, not an object of tensors", out.json.type_name()));
  return out;
}

const Json& field(const Json& entry, const std::string& name, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) bad(fmt::format("tensor {} has no \"{}\"", quote_name(name), key));
  return *it;
}

uint64_t unsigned_value(const Json& v, const std::string& name, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) bad(fmt::format("tensor {}: negative {} {}", quote_name(name), what, v.dump()));
  bad(fmt::format("tensor {}: {} {} is not an integer", quote_name(name), what, v.dump()));
}

std::vector<int64_t> parse_shape(const Json& shape, const std::string& name) {
  if (!shape.is_array()) bad(fmt::format("tensor {}: \"shape\" is not an array", quote_name(name)));
  std::vector<int64_t> dims;
  for (const Json& d : shape) {
    uint64_t v = unsigned_value(d, name, "dimension");
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(fmt::format("tensor {}: dimension {} overflows int64", quote_name(name), v));
    dims.push_back(static_cast<int64_t>(v));
  }
  return dims;
}

SafetensorsEntry parse_entry(const std::string& name, const Json& value) {
  if (!value.is_object())
    bad(fmt::format("tensor {} is a JSON {}, not an object with dtype, shape and data_offsets",
                    quote_name(name), value.type_name()));
  SafetensorsEntry entry{.name = name};
  const Json& dtype = field(value, name, "dtype");
  if (!dtype.is_string()) bad(fmt::format("tensor {}: \"dtype\" is not a string", quote_name(name)));
  auto found = safetensors_dtype_from_name(dtype.get_ref<const std::string&>());
  if (!found)
    bad(fmt::format("tensor {}: dtype {} is not supported (lockstep reads {})", quote_name(name),
                    quote_name(dtype.get_ref<const std::string&>()), supported_dtype_names()));
  entry.dtype = *found;
  entry.shape = parse_shape(field(value, name, "shape"), name);
  const Json& offsets = field(value, name, "data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    bad(fmt::format("tensor {}: \"data_offsets\" is not an array [begin, end]", quote_name(name)));
  entry.begin = unsigned_value(offsets[0], name, "offset");
  entry.end = unsigned_value(offsets[1], name, "offset");
  return entry;
}

std::map<std::string, std::string> parse_metadata(const Json& value) {
  if (!value.is_object())
    bad(fmt::format("\"__metadata__\" is a JSON {}, not an object of strings", value.type_name()));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      bad(fmt::format("metadata {} is a JSON {}, not a string", quote_name(key), v.type_name()));
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

void check_span(const SafetensorsEntry& e, uint64_t data_bytes) {
  if (e.end < e.begin)
    bad(fmt::format("tensor {}: data_offsets end {} < begin {}", quote_name(e.name), e.end, e.begin));
  if (e.end > data_bytes)
    bad(fmt::format("tensor {}: data_offsets [{}, {}) run past the {} data bytes of the file",
                    quote_name(e.name), e.begin, e.end, data_bytes));
  auto need = safetensors_span_bytes(e.dtype, e.shape);
  if (!need) bad(fmt::format("tensor {}: shape {} overflows", quote_name(e.name), shape_text(e.shape)));
  if (*need != e.end - e.begin)
    bad(fmt::format("tensor {}: data_offsets [{}, {}) hold {} bytes, but shape {} of {} needs {}",
                    quote_name(e.name), e.begin, e.end, e.end - e.begin, shape_text(e.shape),
                    safetensors_dtype_name(e.dtype), *need));
}

// The spans must tile [0, data_bytes) exactly, as the reference requires.
void check_coverage(const std::vector<SafetensorsEntry>& entries, uint64_t data_bytes) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
  });
  uint64_t at = 0;
  const SafetensorsEntry* previous = nullptr;
  for (size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    if (e.begin < at)
      bad(fmt::format("tensors {} and {} overlap (bytes [{}, {}))", quote_name(previous->name),
                      quote_name(e.name), e.begin, at));
    if (e.begin > at)
      bad(fmt::format("data bytes [{}, {}) before tensor {} belong to no tensor (a hole)", at,
                      e.begin, quote_name(e.name)));
    at = e.end;
    previous = &e;
  }
  if (at != data_bytes)
    bad(fmt::format("data bytes [{}, {}) after the last tensor belong to no tensor", at, data_bytes));
}

}  // namespace

std::string quote_name(std::string_view s) {
  constexpr size_t kMax = 120;  // a hostile name must not flood the message
  if (s.size() <= kMax) return fmt::format("'{}'", s);
  return fmt::format("'{}...' ({} bytes)", s.substr(0, kMax), s.size());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string supported_dtype_names() {
  std::string names;
  for (const DtypeRow& row : kDtypes) names += (names.empty() ? "" : " ") + std::string(row.name);
  return names;
}

std::optional<uint64_t> safetensors_span_bytes(SafetensorsDtype dtype,
                                               const std::vector<int64_t>& shape) {
  uint64_t bytes = safetensors_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

std::string_view safetensors_dtype_name(SafetensorsDtype dtype) {
  return kDtypes.at(static_cast<size_t>(dtype)).name;
}

size_t safetensors_dtype_size(SafetensorsDtype dtype) {
  return kDtypes.at(static_cast<size_t>(dtype)).size;
}

std::optional<SafetensorsDtype> safetensors_dtype_from_name(std::string_view name) {
  for (const DtypeRow& row : kDtypes)
    if (row.name == name) return row.dtype;
  return std::nullopt;
}

uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size) {
  if (file_size < 8)
    bad(fmt::format("the file has {} bytes, fewer than the 8 of the header length", file_size));
  uint64_t n = read_le64(first8);
  if (n > kSafetensorsMaxHeaderBytes)
    bad(fmt::format("header length {} is over the limit of {} bytes", n, kSafetensorsMaxHeaderBytes));
  if (n > file_size - 8)
    bad(fmt::format("header length {} runs past the end of the file ({} bytes)", n, file_size));
  return n;
}

SafetensorsHeader parse_safetensors_json(std::string_view header, uint64_t file_size) {
  if (header.size() > kSafetensorsMaxHeaderBytes || header.size() + 8 > file_size)
    bad(fmt::format("header of {} bytes does not fit a file of {}", header.size(), file_size));
  ParsedHeader parsed = parse_json_object(header);
  SafetensorsHeader out;
  out.data_start = 8 + header.size();
  for (const std::string& key : parsed.names) {
    const Json& value = parsed.json.at(key);
    if (key == "__metadata__") {
      out.metadata = parse_metadata(value);
      continue;
    }
    out.entries.push_back(parse_entry(key, value));
  }
  uint64_t data_bytes = file_size - out.data_start;
  for (const SafetensorsEntry& e : out.entries) check_span(e, data_bytes);
  check_coverage(out.entries, data_bytes);
  return out;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t file_size) {
  uint64_t n = safetensors_header_length(data, file_size);
  return parse_safetensors_json({reinterpret_cast<const char*>(data) + 8, n}, file_size);
}

SafetensorsHeader read_safetensors_header(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw Error(fmt::format("safetensors: cannot stat {}: {}", path, std::strerror(errno)));
  auto size = static_cast<uint64_t>(st.st_size);
  uint8_t first8[8] = {};
  read_all_at(fd, first8, std::min<uint64_t>(size, 8), 0, path);
  try {
    uint64_t n = safetensors_header_length(first8, size);
    std::string header(n, '\0');  // n is bounded by the limit and the file's size
    read_all_at(fd, header.data(), n, 8, path);
    return parse_safetensors_json(header, size);
  } catch (const Error& e) {
    // "safetensors: X" -> "safetensors: <path>: X"
    std::string_view what = e.what();
    constexpr std::string_view kPrefix = "safetensors: ";
    if (what.starts_with(kPrefix)) what.remove_prefix(kPrefix.size());
    throw Error(fmt::format("{}{}: {}", kPrefix, path, what));
  }
}

void read_all_at(int fd, void* data, uint64_t size, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(data);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("safetensors: cannot read {}: {}", path, std::strerror(errno)));
    if (n == 0)
      throw Error(fmt::format("safetensors: {} ended at byte {} while reading {} bytes at {} (was "
                              "it truncated while being read?)", path, offset + done, size, offset));
    done += static_cast<uint64_t>(n);
  }
}

}  // namespace lockstep
