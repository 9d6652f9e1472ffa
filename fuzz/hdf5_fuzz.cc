// HDF5 files come from other tools: opening any bytes as an HDF5 data set
// and reading and decoding every record must end in samples or
// lockstep::Error (a bad file, dataset, dtype or record), never a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/data/source.h"

namespace {

// libhdf5 resolves the real path of what it opens, so a memfd's
// /proc/self/fd link does not work: one scratch file per fuzzing process,
// removed after every input (an atexit hook, registered while the path's
// own static was still being built, left the file behind even after runs
// that ended normally).
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/lockstep-fuzz-hdf5-" + std::to_string(::getpid()) +
           ".h5";
  }();
  return path;
}

struct RemoveScratch {
  ~RemoveScratch() { std::remove(scratch_path().c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep::data;
  const RemoveScratch remove_scratch;
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) return 0;
  }
  {
    try {
      auto source = open_source({{scratch_path()}});
      // Read everything only when it is what a small file can hold: one
      // record (the reader refuses images over 256 MiB and contiguous data
      // the file cannot hold) times the record count, at most 64 MiB.
      uint64_t records = source->total_records();
      if (records == 0 || records > 4096 || source->records(0) == 0) return 0;
      size_t item = source->read({0, 0, 1}).bytes.size();
      if (item * records > (size_t{64} << 20)) return 0;
      for_each_record(*source, [&](const SegmentData& segment, size_t i) {
        Sample sample;
        try {
          source->decode(segment, i, DecodeOptions{}, 0, &sample);
        } catch (const BadRecord&) {
        }
      });
    } catch (const lockstep::Error&) {
    }
  }
  return 0;
}
