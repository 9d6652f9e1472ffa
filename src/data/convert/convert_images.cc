#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/convert.h"
#include "lockstep/data/example.h"
#include "lockstep/data/image.h"
#include "data/format/dataset_writer.h"
#include "data/rng.h"

namespace lockstep::data {
namespace fs = std::filesystem;
namespace {

struct Item {
  int64_t position;  // in sorted (class, file) order, before any shuffle
  fs::path path;
  int64_t label;
  std::string class_name;
};

bool has_image_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<Item> list_items(const std::string& root, uint64_t* ignored) {
  if (!fs::is_directory(root))
    throw Error(fmt::format("{} is not a folder; expected <root>/<class>/<image files>", root));
  std::vector<fs::path> classes;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) classes.push_back(entry.path());
  std::sort(classes.begin(), classes.end());
  std::vector<Item> items;
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(classes[label])) {
      if (!entry.is_regular_file()) continue;
      if (has_image_extension(entry.path()))
        files.push_back(entry.path());
      else
        ++*ignored;
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files)
      items.push_back({static_cast<int64_t>(items.size()), std::move(f),
                       static_cast<int64_t>(label), classes[label].filename().string()});
  }
  return items;
}

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", path.string()));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

ConvertResult convert_image_folder(const std::string& root, const ShardOutput& out,
                                   uint64_t shuffle_seed, uint64_t* ignored_files) {
  uint64_t ignored = 0;
  std::vector<Item> items = list_items(root, &ignored);
  if (ignored_files) *ignored_files = ignored;
  if (shuffle_seed != 0) Rng(shuffle_seed).shuffle(items);
  std::unique_ptr<DatasetWriter> writer = make_dataset_writer(out);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string bytes = read_whole(items[i].path);
    ImageFormat format = sniff_image_format(bytes);
    if (format == ImageFormat::kUnknown)
      throw Error(
          fmt::format("{} is named like an image but is neither JPEG nor PNG; "
                      "remove or re-encode it",
                      items[i].path.string()));
    Example example;
    example.set_bytes("image", std::move(bytes))
        .set_int64s("label", {items[i].label})
        .set_bytes("class", items[i].class_name)
        .set_int64s("index", {items[i].position})
        .set_bytes("format", format == ImageFormat::kJpeg ? "jpeg" : "png");
    writer->add(example);
    if (out.progress) out.progress(i + 1, items.size(), writer->bytes());
  }
  return writer->finish();
}

}  // namespace lockstep::data
