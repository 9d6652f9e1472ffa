// Record files come from disk and other tools: reading any bytes must end in
// records, a clean end, or lockstep::Error (BadRecord), in both policies, and
// parsing any payload as an Example must not crash.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/data/example.h"
#include "lockstep/data/record_io.h"

namespace {

void read_all(const std::string& path, lockstep::data::BadDataPolicy policy) {
  try {
    lockstep::data::RecordReader reader(path, policy);
    std::string payload, error;
    while (reader.next(&payload)) lockstep::data::parse_example(payload, &error);
  } catch (const lockstep::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("records", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (::write(fd, data, size) == static_cast<ssize_t>(size)) {
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    read_all(path, lockstep::data::BadDataPolicy::kThrow);
    read_all(path, lockstep::data::BadDataPolicy::kSkip);
  }
  ::close(fd);
  std::string error;
  lockstep::data::parse_example(std::string_view(reinterpret_cast<const char*>(data), size),
                                &error);
  return 0;
}
