#include "tools/bench_data/cases.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/data/record_io.h"

namespace lockstep::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t cat_file(const std::string& path, std::vector<char>& buffer) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path);
  uint64_t total = 0;
  for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) total += uint64_t(n);
  ::close(fd);
  return total;
}

// Repeats `pass` (which adds to the row) until min_seconds have passed.
template <typename Pass>
Row repeat(Row row, double min_seconds, Pass pass) {
  pass(row);  // warm-up: pulls the files into the page cache
  row.records = row.bytes = 0;
  auto start = Clock::now();
  do pass(row);
  while (since(start) < min_seconds);
  row.seconds = since(start);
  return row;
}

}  // namespace

Row page_cache_read(const std::vector<std::string>& files, double min_seconds) {
  std::vector<char> buffer(4 << 20);
  return repeat({"page-cache read()", 1}, min_seconds, [&](Row& row) {
    for (const auto& f : files) row.bytes += cat_file(f, buffer);
  });
}

Row record_read(const std::vector<std::string>& files, size_t threads, double min_seconds) {
  return repeat({"record read + CRC", threads}, min_seconds, [&](Row& row) {
    std::vector<uint64_t> records(threads), bytes(threads);
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::string payload;
        for (size_t f = t; f < files.size(); f += threads) {
          data::RecordReader reader(files[f]);
          while (reader.next(&payload)) ++records[t];
          bytes[t] += reader.offset();
        }
      });
    for (auto& th : pool) th.join();
    for (size_t t = 0; t < threads; ++t) {
      row.records += records[t];
      row.bytes += bytes[t];
    }
  });
}

Row pipeline_epochs(const std::string& name, data::LoaderOptions options, double min_seconds,
                    uint64_t epoch_bytes) {
  data::Loader loader(options);
  for (const auto& s : loader.options().index.shards) epoch_bytes += s.bytes;
  if (epoch_bytes == 0)
    for (const auto& s : data::RecordIndex::load(options.index_path).shards) epoch_bytes += s.bytes;
  uint64_t epoch = 0;
  return repeat({name, options.threads}, min_seconds, [&](Row& row) {
    loader.start_epoch(epoch++);
    while (auto batch = loader.next()) row.records += batch->size();
    row.bytes += epoch_bytes;
  });
}

}  // namespace lockstep::bench
