#include "tools/bench_data/datasets.h"

#include <filesystem>
#include <random>

#include "lockstep/data/convert.h"
#include "lockstep/data/example.h"
#include "lockstep/data/image.h"
#include "lockstep/data/shard_writer.h"

namespace lockstep::bench {
namespace fs = std::filesystem;

std::string make_idx_shards(const std::string& work_dir, const std::string& mnist_dir,
                            size_t records) {
  std::string images = mnist_dir + "/train-images-idx3-ubyte.gz";
  std::string labels = mnist_dir + "/train-labels-idx1-ubyte.gz";
  if (fs::exists(images) && fs::exists(labels))
    return data::convert_idx(images, labels, {work_dir + "/idx", "train", 4, nullptr}).index_path;
  data::ShardSetWriter writer(work_dir + "/idx", "synthetic", 4);
  std::mt19937 rng(1);
  std::string pixels(28 * 28, '\0');
  for (size_t i = 0; i < records; ++i) {
    for (char& p : pixels) p = static_cast<char>(rng());
    data::Example e;
    e.set_bytes("image", pixels)
        .set_int64s("label", {int64_t(i % 10)})
        .set_int64s("shape", {28, 28})
        .set_bytes("format", "raw");
    writer.add(serialize_example(e));
  }
  writer.finish();
  return writer.index_path();
}

std::vector<std::string> convert_to(const std::string& index_path, const std::string& work_dir,
                                    const std::string& format) {
  data::ShardOutput out{work_dir + "/" + format, "train", 4, nullptr, data::parse_format(format)};
  return data::convert_dataset({{index_path}}, out).paths;
}

uint64_t bytes_on_disk(const std::vector<std::string>& paths) {
  uint64_t total = 0;
  for (const auto& path : paths)
    total += fs::file_size(fs::is_directory(path) ? fs::path(path) / "data.mdb" : fs::path(path));
  return total;
}

std::string make_jpeg_shards(const std::string& work_dir, size_t count, int size) {
  data::ShardSetWriter writer(work_dir + "/jpeg", "images", 4);
  std::mt19937 rng(2);
  data::Image img{size, size, 3, std::vector<uint8_t>(size_t(size) * size * 3)};
  for (size_t i = 0; i < count; ++i) {
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x)
        for (int c = 0; c < 3; ++c)
          img.pixels[(size_t(y) * size + x) * 3 + c] =
              static_cast<uint8_t>((x * (c + 1) + y * 2 + i * 13) / 2 + rng() % 24);
    data::Example e;
    e.set_bytes("image", data::encode_jpeg(img, 90))
        .set_int64s("label", {int64_t(i % 1000)})
        .set_bytes("format", "jpeg");
    writer.add(serialize_example(e));
  }
  writer.finish();
  return writer.index_path();
}

}  // namespace lockstep::bench
