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

// Deeper nesting is never a valid header (object > entry > shape array).
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

const Json& field(const Json& entry, const std::string& name, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) bad(fmt::format("tensor {} has no \"{}\"", quote_name(name), key));
  return *it;
}

uint64_t unsigned_value(const Json& v, const std::string& name, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    bad(fmt::format("tensor {}: negative {} {}", quote_name(name), what, v.dump()));
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
  if (!dtype.is_string())
    bad(fmt::format("tensor {}: \"dtype\" is not a string", quote_name(name)));
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

// Note [Header scan]
// The header is read by a SAX handler that builds one tensor's small JSON
// value at a time, checks it (parse_entry) and drops it, so a hostile 100 MB
// header costs its entries, not a JSON tree of it. The
// handler also refuses duplicate keys, which nlohmann's DOM keeps silently
// (two tensors of one name would load whichever it kept) and its parser
// callback could see only by rescanning the parent after every object:
// quadratic in a header of a million tensors (a test pins it).
class HeaderScan final : public nlohmann::json_sax<Json> {
 public:
  SafetensorsHeader out;

  bool null() override { return value(Json()); }
  bool boolean(bool v) override { return value(Json(v)); }
  bool number_integer(number_integer_t v) override { return value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(Json(v)); }
  bool string(string_t& v) override { return value(Json(v)); }
  bool binary(binary_t&) override { return value(Json()); }
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override {
    if (depth_ == 0) bad("the header is a JSON array, not an object of tensors");
    return open(Json::array());
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second)
      bad(fmt::format("duplicate {} {}", depth_ == 1 ? "tensor name" : "key", quote_name(key)));
    (depth_ == 1 ? name_ : key_) = key;
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    return close();
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    bad(fmt::format("the header is not JSON ({})", e.what()));
  }

 private:
  // A scalar: a top-level tensor's whole value, or a part of the one open.
  bool value(Json v) {
    if (depth_ == 0)
      bad(fmt::format("the header is a JSON {}, not an object of tensors", v.type_name()));
    if (depth_ == 1)
      finish(v);
    else
      add(std::move(v));
    return true;
  }
  bool open(Json container) {
    if (++depth_ > kMaxDepth) bad(fmt::format("header nests deeper than {} levels", kMaxDepth));
    if (container.is_object()) keys_.emplace_back();
    if (depth_ == 2) {
      current_ = std::move(container);
      path_.assign(1, &current_);
    } else if (depth_ > 2) {
      path_.push_back(add(std::move(container)));
    }
    return true;
  }
  bool close() {
    if (depth_ >= 2) path_.pop_back();
    if (depth_ == 2) finish(current_);
    --depth_;
    return true;
  }
  Json* add(Json v) {
    Json& parent = *path_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }
  void finish(const Json& v) {
    if (name_ == "__metadata__")
      out.metadata = parse_metadata(v);
    else
      out.entries.push_back(parse_entry(name_, v));
  }

  int depth_ = 0;                            // open containers
  std::vector<std::set<std::string>> keys_;  // keys seen, per open object
  std::string name_, key_;                   // the tensor's name, the open object's key
  Json current_;                             // the open tensor's value
  std::vector<Json*> path_;                  // its open containers, innermost last
};

void check_span(const SafetensorsEntry& e, uint64_t data_bytes) {
  if (e.end < e.begin)
    bad(fmt::format("tensor {}: data_offsets end {} < begin {}", quote_name(e.name), e.end,
                    e.begin));
  if (e.end > data_bytes)
    bad(fmt::format("tensor {}: data_offsets [{}, {}) run past the {} data bytes of the file",
                    quote_name(e.name), e.begin, e.end, data_bytes));
  auto need = safetensors_span_bytes(e.dtype, e.shape);
  if (!need)
    bad(fmt::format("tensor {}: shape {} overflows", quote_name(e.name), shape_text(e.shape)));
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
    return std::pair(entries[a].begin, entries[a].end) <
           std::pair(entries[b].begin, entries[b].end);
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
    bad(fmt::format("data bytes [{}, {}) after the last tensor belong to no tensor", at,
                    data_bytes));
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
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      return std::nullopt;
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
    bad(fmt::format("header length {} is over the limit of {} bytes", n,
                    kSafetensorsMaxHeaderBytes));
  if (n > file_size - 8)
    bad(fmt::format("header length {} runs past the end of the file ({} bytes)", n, file_size));
  return n;
}

SafetensorsHeader parse_safetensors_json(std::string_view header, uint64_t file_size) {
  if (header.size() > kSafetensorsMaxHeaderBytes || header.size() + 8 > file_size)
    bad(fmt::format("header of {} bytes does not fit a file of {}", header.size(), file_size));
  HeaderScan scan;
  Json::sax_parse(header.begin(), header.end(), &scan);
  SafetensorsHeader out = std::move(scan.out);
  out.data_start = 8 + header.size();
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
    if (n < 0)
      throw Error(fmt::format("safetensors: cannot read {}: {}", path, std::strerror(errno)));
    if (n == 0)
      throw Error(
          fmt::format("safetensors: {} ended at byte {} while reading {} bytes at {} (was "
                      "it truncated while being read?)",
                      path, offset + done, size, offset));
    done += static_cast<uint64_t>(n);
  }
}

}  // namespace lockstep
