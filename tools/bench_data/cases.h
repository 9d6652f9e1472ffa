// Benchmark cases of `lockstep bench data`; each returns one measured row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data/loader.h"

namespace lockstep::bench {

struct Row {
  std::string name;
  size_t threads = 1;
  uint64_t records = 0;  // 0 for a pure byte read
  uint64_t bytes = 0;
  double seconds = 0;
  double records_per_s() const { return records / seconds; }
  double mb_per_s() const { return bytes / seconds / 1e6; }
};

// Plain read() of the files in 4 MiB blocks, as `cat` reads: the ceiling.
Row page_cache_read(const std::vector<std::string>& files, double min_seconds);
// RecordReader front to back (framing + CRC only), files split over threads.
Row record_read(const std::vector<std::string>& files, size_t threads, double min_seconds);
// Whole epochs of the pipeline (read, shuffle, decode, augment, batch);
// `epoch_bytes` (0: the record shards' size from the index) for MB/s.
Row pipeline_epochs(const std::string& name, data::LoaderOptions options, double min_seconds,
                    uint64_t epoch_bytes = 0);

}  // namespace lockstep::bench
