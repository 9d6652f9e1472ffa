#include "lockstep/data/idx.h"

#include <zlib.h>

#include <filesystem>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::data {
namespace {

std::vector<uint8_t> read_gz_or_raw(const std::string& path) {
  // gzread passes non-gzip files through unchanged, so one path reads both.
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(fmt::format("cannot open IDX file {}", path));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string message = msg ? msg : "";
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    throw Error(fmt::format("{}: corrupt gzip stream ({})", path, message));
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

size_t IdxArray::item_size() const {
  size_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> raw = read_gz_or_raw(path);
  if (raw.size() < 4 || raw[0] != 0 || raw[1] != 0)
    throw Error(fmt::format("{}: not an IDX file (bad magic)", path));
  if (raw[2] != 0x08)
    throw Error(fmt::format("{}: IDX element type 0x{:02x} unsupported (only unsigned byte)", path,
                            raw[2]));
  size_t rank = raw[3];
  if (rank == 0 || raw.size() < 4 + 4 * rank)
    throw Error(fmt::format("{}: truncated IDX header", path));
  IdxArray out;
  size_t total = 1;
  for (size_t i = 0; i < rank; ++i) {
    out.dims.push_back(be32(&raw[4 + 4 * i]));
    total *= out.dims.back();
  }
  size_t header = 4 + 4 * rank;
  if (raw.size() - header != total)
    throw Error(fmt::format("{}: header promises {} bytes of data, file has {}", path, total,
                            raw.size() - header));
  out.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
  return out;
}

MnistSplit load_mnist_split(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  auto pick = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      fs::path p = fs::path(dir) / (stem + ext);
      if (fs::exists(p)) return p.string();
    }
    throw Error(fmt::format(
        "{}/{}(.gz) not found: install the Debian package dataset-fashion-mnist "
        "(apt-get install dataset-fashion-mnist) or pass the folder holding the IDX files",
        dir, stem));
  };
  MnistSplit out;
  out.images = read_idx(pick(split + "-images-idx3-ubyte"));
  out.labels = read_idx(pick(split + "-labels-idx1-ubyte"));
  if (out.images.count() != out.labels.count())
    throw Error(
        fmt::format("{}: {} images but {} labels", dir, out.images.count(), out.labels.count()));
  return out;
}

}  // namespace lockstep::data
