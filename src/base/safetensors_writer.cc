// The safetensors writer: plans the layout (Note [safetensors layout] in
// include/lockstep/base/safetensors.h), then writes it into memory or an fd.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "base/safetensors_internal.h"
#include "lockstep/base/error.h"
#include "lockstep/base/safetensors.h"

namespace lockstep {
namespace {

// The data is the host's memory as is.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

using Json = nlohmann::json;

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument("safetensors: cannot write: " + what);
}

void check_names(const std::vector<SafetensorsEntry>& entries) {
  std::set<std::string_view> seen;
  for (const SafetensorsEntry& e : entries) {
    if (e.name == "__metadata__")
      refuse(
          "a tensor is named '__metadata__', the key the format reserves for metadata; rename it");
    if (!seen.insert(e.name).second)
      refuse(fmt::format("two tensors are named {}; names must be unique", quote_name(e.name)));
  }
}

// The JSON object is assembled as text, entry by entry, in the caller's
// order: nlohmann's ordered_json would insert each key by a linear scan.
std::string dump_header(const std::vector<SafetensorsEntry>& entries,
                        const std::map<std::string, std::string>& metadata) {
  try {
    std::string text = "{";
    if (!metadata.empty()) text += "\"__metadata__\":" + Json(metadata).dump();
    for (const SafetensorsEntry& e : entries) {
      Json info = {{"dtype", std::string(safetensors_dtype_name(e.dtype))},
                   {"shape", e.shape},
                   {"data_offsets", {e.begin, e.end}}};
      text += (text.size() > 1 ? "," : "") + Json(e.name).dump() + ":" + info.dump();
    }
    text += "}";
    text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    return text;
  } catch (const Json::type_error& e) {  // invalid UTF-8 in a name or metadata
    refuse(fmt::format("a tensor name or metadata string is not UTF-8 ({})", e.what()));
  }
}

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

std::vector<SafetensorsEntry> entries_of(const std::vector<SafetensorsView>& views) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(views.size());
  for (const SafetensorsView& v : views) entries.push_back({v.name, v.dtype, v.shape, 0, 0});
  return entries;
}

void check_view(const SafetensorsView& view, const SafetensorsEntry& entry) {
  uint64_t need = entry.end - entry.begin;
  if (view.bytes != need)
    refuse(fmt::format("tensor {} has {} bytes of data, but shape {} of {} needs {}",
                       quote_name(view.name), view.bytes, shape_text(view.shape),
                       safetensors_dtype_name(view.dtype), need));
  if (need > 0 && view.data == nullptr)
    refuse(fmt::format("tensor {} has no data", quote_name(view.name)));
}

}  // namespace

SafetensorsLayout plan_safetensors(const std::vector<SafetensorsEntry>& entries,
                                   const std::map<std::string, std::string>& metadata) {
  check_names(entries);
  SafetensorsLayout layout;
  layout.entries = entries;
  layout.data_order.resize(entries.size());
  std::iota(layout.data_order.begin(), layout.data_order.end(), size_t{0});
  std::stable_sort(layout.data_order.begin(), layout.data_order.end(), [&](size_t a, size_t b) {
    return safetensors_dtype_size(entries[a].dtype) > safetensors_dtype_size(entries[b].dtype);
  });
  uint64_t at = 0;
  for (size_t i : layout.data_order) {
    SafetensorsEntry& e = layout.entries[i];
    auto bytes = safetensors_span_bytes(e.dtype, e.shape);
    if (!bytes)
      refuse(fmt::format("tensor {} has a negative or overflowing shape {}", quote_name(e.name),
                         shape_text(e.shape)));
    e.begin = at;
    if (__builtin_add_overflow(at, *bytes, &at)) refuse("the tensors' bytes overflow 64 bits");
    e.end = at;
  }
  std::string header = dump_header(layout.entries, metadata);
  if (header.size() > kSafetensorsMaxHeaderBytes)
    refuse(
        fmt::format("the header would have {} bytes, over the {} readers accept; split the tensors "
                    "into shards",
                    header.size(), kSafetensorsMaxHeaderBytes));
  layout.prefix = le64(header.size()) + header;
  layout.file_size = layout.prefix.size() + at;
  return layout;
}

std::string serialize_safetensors(const std::vector<SafetensorsView>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout layout = plan_safetensors(entries_of(tensors), metadata);
  std::string out = layout.prefix;
  out.reserve(layout.file_size);
  for (size_t i : layout.data_order) {
    check_view(tensors[i], layout.entries[i]);
    out.append(static_cast<const char*>(tensors[i].data), tensors[i].bytes);
  }
  return out;
}

void write_safetensors(int fd, const std::string& path, const std::vector<SafetensorsView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout layout = plan_safetensors(entries_of(tensors), metadata);
  for (size_t i = 0; i < tensors.size(); ++i) check_view(tensors[i], layout.entries[i]);
  write_all_to_fd(fd, layout.prefix.data(), layout.prefix.size(), path);
  for (size_t i : layout.data_order) write_all_to_fd(fd, tensors[i].data, tensors[i].bytes, path);
}

void write_all_to_fd(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(
          fmt::format("safetensors: cannot write {}: {} (check the directory is writable and "
                      "has space)",
                      path, std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
}

}  // namespace lockstep
