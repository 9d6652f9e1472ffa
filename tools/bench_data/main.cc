// `lockstep bench data`: how far the input pipeline outruns training.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "lockstep/base/error.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/record_index.h"
#include "tools/bench_data/cases.h"
#include "tools/bench_data/datasets.h"
#include "tools/common/cli_checks.h"

namespace {

using lockstep::bench::Row;

struct Settings {
  double consume_rate = 8000;
  double seconds = 2;
  std::vector<size_t> threads{1, 2};
  size_t images = 1000;
  int image_size = 256;
  int crop = 224;
  std::string mnist_dir = lockstep::data::kFashionMnistDir;
  std::string work_dir;
  bool json = false;
};

constexpr double kGoalRatio = 20;  // the pipeline must outrun training by this much

void print(const Row& row, const Settings& s) {
  double ratio = row.records ? row.records_per_s() / s.consume_rate : 0;
  if (s.json) {
    std::printf(
        "{\"bench\":\"data\",\"case\":\"%s\",\"threads\":%zu,\"records_per_s\":%.0f,"
        "\"mb_per_s\":%.1f,\"consume_rate\":%.0f,\"ratio\":%.2f}\n",
        row.name.c_str(), row.threads, row.records ? row.records_per_s() : 0.0, row.mb_per_s(),
        s.consume_rate, ratio);
  } else if (row.records) {
    std::printf("%-28s %7zu %14.0f %10.1f %9.1fx\n", row.name.c_str(), row.threads,
                row.records_per_s(), row.mb_per_s(), ratio);
  } else {
    std::printf("%-28s %7zu %14s %10.1f %10s\n", row.name.c_str(), row.threads, "-", row.mb_per_s(),
                "-");
  }
  std::fflush(stdout);
}

std::vector<std::string> shard_files(const std::string& index_path) {
  std::vector<std::string> files;
  for (const auto& s : lockstep::data::RecordIndex::load(index_path).shards)
    files.push_back(s.path);
  return files;
}

void run(const Settings& s) {
  using namespace lockstep;
  std::string idx = bench::make_idx_shards(s.work_dir, s.mnist_dir, 60000);
  std::string jpeg = bench::make_jpeg_shards(s.work_dir, s.images, s.image_size);
  if (!s.json)
    std::printf("%-28s %7s %14s %10s %10s\n", "case", "threads", "records/s", "MB/s", "x consume");
  print(bench::page_cache_read(shard_files(idx), s.seconds), s);
  for (size_t t : s.threads) print(bench::record_read(shard_files(idx), t, s.seconds), s);
  // The same 28x28 records from each format, interleaved per thread count.
  std::vector<std::string> h5 = bench::convert_to(idx, s.work_dir, "hdf5");
  std::vector<std::string> lmdb = bench::convert_to(idx, s.work_dir, "lmdb");
  data::LoaderOptions o;
  o.batch_size = 128;
  double best_idx = 0;
  for (size_t t : s.threads) {
    o.threads = t;
    o.index_path = idx;
    Row row = bench::pipeline_epochs("pipeline idx 28x28 records", o, s.seconds);
    best_idx = std::max(best_idx, row.records_per_s());
    print(row, s);
    o.source.paths = h5;
    print(bench::pipeline_epochs("pipeline idx 28x28 hdf5", o, s.seconds, bench::bytes_on_disk(h5)),
          s);
    o.source.paths = lmdb;
    print(
        bench::pipeline_epochs("pipeline idx 28x28 lmdb", o, s.seconds, bench::bytes_on_disk(lmdb)),
        s);
    o.source = {};
  }
  o.index_path = jpeg;
  o.batch_size = 32;
  o.decode.channels = 3;
  o.decode.crop_height = o.decode.crop_width = s.crop;
  o.decode.random_flip = true;
  o.decode.mean = {0.485f, 0.456f, 0.406f};
  o.decode.stddev = {0.229f, 0.224f, 0.225f};
  for (size_t t : s.threads) {
    o.threads = t;
    print(bench::pipeline_epochs("pipeline jpeg decode+augment", o, s.seconds), s);
  }
  if (!s.json)
    std::printf("\nidx pipeline: %.1fx the consume rate of %.0f samples/s (goal >= %.0fx): %s\n",
                best_idx / s.consume_rate, s.consume_rate, kGoalRatio,
                best_idx / s.consume_rate >= kGoalRatio ? "met" : "NOT met");
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  bool keep = false;
  CLI::App app{"Input pipeline throughput against the training consumption rate",
               "lockstep bench data"};
  using lockstep::cli::at_least;
  using lockstep::cli::greater_than;
  app.add_option("--consume-rate", s.consume_rate, "samples/s training consumes")
      ->default_val(8000)
      ->check(greater_than(0));
  app.add_option("--seconds", s.seconds, "minimum timed seconds per case")
      ->default_val(2)
      ->check(greater_than(0));
  app.add_option("--threads", s.threads, "decode thread counts to try")
      ->delimiter(',')
      ->check(at_least(1));
  app.add_option("--images", s.images, "generated JPEGs")->default_val(1000)->check(at_least(1));
  app.add_option("--image-size", s.image_size, "JPEG side in pixels")
      ->default_val(256)
      ->check(at_least(1));
  app.add_option("--crop", s.crop, "random crop side for JPEGs")
      ->default_val(224)
      ->check(at_least(1));
  app.add_option("--mnist-dir", s.mnist_dir, "Fashion-MNIST folder (synthetic data if missing)");
  app.add_option("--work-dir", s.work_dir, "where to write shards (default: a temp folder)");
  app.add_flag("--keep", keep, "keep the work folder");
  app.add_flag("--json", s.json, "JSON lines instead of a table");
  if (auto status = lockstep::cli::parse_or_status(app, argc, argv)) return *status;
  if (s.crop > s.image_size) {
    std::fprintf(stderr, "lockstep bench data: --crop %d is larger than --image-size %d\n", s.crop,
                 s.image_size);
    return 2;
  }
  bool temp = s.work_dir.empty();
  if (temp) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "lockstep-bench-data-XXXXXX").string();
    s.work_dir = mkdtemp(tmpl.data());
  }
  int rc = 0;
  try {
    run(s);
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "lockstep bench data: %s\n", e.what());
    rc = 1;
  }
  if (temp && !keep) std::filesystem::remove_all(s.work_dir);
  return rc;
}
