#include "lockstep/data/source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_hdf5_signature(const std::string& path) {
  // The superblock sits at 0, 512, 1024, ... ; files we and h5py write have it at 0.
  static constexpr char kSignature[] = "\x89HDF\r\n\x1a\n";
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  return in.read(head, 8) && std::equal(head, head + 8, kSignature);
}

}  // namespace

const char* format_name(SourceFormat format) {
  switch (format) {
    case SourceFormat::kRecords: return "records";
    case SourceFormat::kHdf5: return "hdf5";
    case SourceFormat::kLmdb: return "lmdb";
  }
  return "?";
}

SourceFormat parse_format(const std::string& name) {
  for (auto f : {SourceFormat::kRecords, SourceFormat::kHdf5, SourceFormat::kLmdb})
    if (name == format_name(f)) return f;
  throw InvalidArgument(fmt::format("unknown data format '{}': use records, hdf5 or lmdb", name));
}

uint64_t SampleSource::total_records() const {
  uint64_t n = 0;
  for (uint64_t r : records_) n += r;
  return n;
}

SourceFormat detect_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "data.mdb", ec)) return SourceFormat::kLmdb;
    throw Error(
        fmt::format("{} is a folder without data.mdb: not an LMDB environment; give a "
                    "<name>.index.json, an HDF5 file or an LMDB folder",
                    path));
  }
  if (!fs::exists(path, ec)) throw Error(fmt::format("data set {} does not exist", path));
  if (ends_with(path, ".index.json")) return SourceFormat::kRecords;
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5") || has_hdf5_signature(path))
    return SourceFormat::kHdf5;
  if (ends_with(path, ".mdb")) return SourceFormat::kLmdb;
  throw Error(
      fmt::format("{}: not a record index (*.index.json), an HDF5 file or an LMDB "
                  "environment; convert it with 'lockstep convert'",
                  path));
}

std::unique_ptr<SampleSource> open_source(const SourceSpec& spec) {
  if (spec.paths.empty()) throw InvalidArgument("open_source: no data set paths given");
  SourceFormat format = detect_format(spec.paths.front());
  for (const auto& path : spec.paths)
    if (detect_format(path) != format)
      throw InvalidArgument(fmt::format("data set mixes formats: {} is {}, {} is {}",
                                        spec.paths.front(), format_name(format), path,
                                        format_name(detect_format(path))));
  switch (format) {
    case SourceFormat::kRecords:
      if (spec.paths.size() != 1)
        throw InvalidArgument("give one <name>.index.json (it lists every shard)");
      return open_record_source(spec.paths.front());
    case SourceFormat::kHdf5: return open_hdf5_source(spec);
    case SourceFormat::kLmdb: return open_lmdb_source(spec.paths);
  }
  throw InvalidArgument("unknown data format");
}

SourceSpec find_split(const std::string& dir, const std::string& split) {
  SourceSpec spec;
  fs::path base(dir);
  std::error_code ec;
  for (const char* ext : {".index.json", ".h5", ".hdf5", ".lmdb"}) {
    fs::path candidate = base / (split + ext);
    if (fs::exists(candidate, ec)) {
      spec.paths.push_back(candidate.string());
      return spec;
    }
  }
  // HDF5 shards: <split>-00000-of-00004.h5, ...
  if (fs::is_directory(base, ec))
    for (const auto& entry : fs::directory_iterator(base, ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind(split + "-", 0) == 0 && (ends_with(name, ".h5") || ends_with(name, ".hdf5")))
        spec.paths.push_back(entry.path().string());
    }
  std::sort(spec.paths.begin(), spec.paths.end());
  return spec;
}

}  // namespace lockstep::data
