// The zip central directory walk of zip_check.h (PKWARE APPNOTE 4.3.12-4.3.16).
#include "torch/zip_check.h"

#include <fmt/format.h>

#include <fstream>
#include <string_view>

#include "lockstep/base/error.h"

namespace lockstep::torch::detail {
namespace {

constexpr uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50,
                   kEntrySig = 0x02014b50;
constexpr size_t kEndSize = 22, kEntrySize = 46, kMaxComment = 0xffff;

class ZipFile {
 public:
  explicit ZipFile(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) fail("cannot be opened");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(
        fmt::format("{} is not a readable zip archive: {} (a torch.save file is a zip; "
                    "is it truncated or of another format?)",
                    path_, why));
  }
  std::string read(uint64_t at, uint64_t n) {
    if (at > size_ || n > size_ - at)
      fail(fmt::format("bytes {}..{} lie past its end", at, at + n));
    std::string out(n, '\0');
    in_.seekg(static_cast<std::streamoff>(at));
    in_.read(out.data(), static_cast<std::streamsize>(n));
    if (!in_) fail("a read failed");
    return out;
  }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

uint64_t le(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + k])) << (8 * k);
  return v;
}

struct Directory {
  uint64_t offset = 0, size = 0, entries = 0;
};

Directory find_directory(ZipFile& zip) {
  if (zip.size() < kEndSize) zip.fail(fmt::format("it has {} bytes", zip.size()));
  uint64_t tail_size = std::min<uint64_t>(zip.size(), kEndSize + kMaxComment);
  uint64_t tail_at = zip.size() - tail_size;
  std::string tail = zip.read(tail_at, tail_size);
  for (size_t at = tail.size() - kEndSize + 1; at-- > 0;) {
    if (le(tail, at, 4) != kEndSig) continue;
    Directory d{le(tail, at + 16, 4), le(tail, at + 12, 4), le(tail, at + 10, 2)};
    if (d.offset != 0xffffffff && d.entries != 0xffff) return d;
    // Zip64: the locator sits just before the end record and points at the real one.
    if (tail_at + at < 20) zip.fail("a zip64 end record without its locator");
    std::string locator = zip.read(tail_at + at - 20, 20);
    if (le(locator, 0, 4) != kLocator64Sig) zip.fail("a zip64 end record without its locator");
    std::string end64 = zip.read(le(locator, 8, 8), 56);
    if (le(end64, 0, 4) != kEnd64Sig)
      zip.fail("the zip64 end record is not where its locator says");
    return {le(end64, 48, 8), le(end64, 40, 8), le(end64, 32, 8)};
  }
  zip.fail("no end-of-central-directory record");
}

// The zip64 extra field (id 1) holds the 64-bit sizes that read 0xffffffff.
void zip64_sizes(std::string_view extra, uint64_t& uncompressed, uint64_t& compressed) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    size_t id = le(extra, at, 2), n = le(extra, at + 2, 2);
    if (at + 4 + n > extra.size()) return;
    size_t field = at + 4;
    if (id == 1) {
      if (uncompressed == 0xffffffff && field + 8 <= at + 4 + n)
        uncompressed = le(extra, field, 8), field += 8;
      if (compressed == 0xffffffff && field + 8 <= at + 4 + n) compressed = le(extra, field, 8);
      return;
    }
    at += 4 + n;
  }
}

}  // namespace

std::map<std::string, uint64_t> checked_zip_records(const std::string& path, bool stored_only) {
  ZipFile zip(path);
  Directory dir = find_directory(zip);
  if (dir.entries > dir.size / kEntrySize)
    zip.fail("its directory is shorter than its entry count");
  std::string cd = zip.read(dir.offset, dir.size);
  std::map<std::string, uint64_t> records;
  size_t at = 0;
  for (uint64_t e = 0; e < dir.entries; ++e) {
    if (at + kEntrySize > cd.size() || le(cd, at, 4) != kEntrySig)
      zip.fail(fmt::format("directory entry {} is damaged", e));
    uint64_t method = le(cd, at + 10, 2), compressed = le(cd, at + 20, 4),
             uncompressed = le(cd, at + 24, 4);
    size_t name_len = le(cd, at + 28, 2), extra_len = le(cd, at + 30, 2),
           comment_len = le(cd, at + 32, 2);
    if (at + kEntrySize + name_len + extra_len + comment_len > cd.size())
      zip.fail(fmt::format("directory entry {} is truncated", e));
    std::string name = cd.substr(at + kEntrySize, name_len);
    zip64_sizes(std::string_view(cd).substr(at + kEntrySize + name_len, extra_len), uncompressed,
                compressed);
    if (stored_only && (method != 0 || compressed != uncompressed))
      zip.fail(
          fmt::format("record {} is compressed (torch.save stores records uncompressed)", name));
    if (stored_only && uncompressed > zip.size())
      zip.fail(
          fmt::format("record {} claims {} bytes in a file of {}", name, uncompressed, zip.size()));
    records[name] = uncompressed;
    at += kEntrySize + name_len + extra_len + comment_len;
  }
  return records;
}

}  // namespace lockstep::torch::detail
