// Converters from common dataset layouts to record shards + index. Used by
// `lockstep convert`; no LibTorch. Each call is single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace lockstep::data {

// Called after each record: records done, records in total, bytes written.
using ProgressFn = std::function<void(uint64_t done, uint64_t total, uint64_t bytes)>;

struct ShardOutput {
  std::string dir;     // created if missing
  std::string name;    // shards are <name>-0000k-of-0000N.tfrecord, index <name>.index.json
  size_t shards = 4;
  ProgressFn progress;  // may be empty
};

struct ConvertResult {
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::string index_path;
};

// IDX image + label files (MNIST/Fashion-MNIST, gzip'd or not), in file
// order. Features: "image" (raw H*W bytes), "label" (int64), "shape"
// (int64 [H, W]), "format" ("raw"), "index" (int64 position in the IDX file).
ConvertResult convert_idx(const std::string& images_path, const std::string& labels_path,
                          const ShardOutput& out);

// root/<class>/<file>.jpg|.jpeg|.png; label = index of the class folder in
// sorted order. Features: "image" (the encoded file bytes), "label",
// "class" (folder name), "format" ("jpeg"|"png"), "index" (position in
// sorted class/file order). shuffle_seed != 0 writes
// the records in a seeded random order instead of class by class (advised:
// the pipeline shuffles blocks of consecutive records). Throws Error for a
// file whose content is not JPEG/PNG; other files are counted in
// *ignored_files (when given) and left out.
ConvertResult convert_image_folder(const std::string& root, const ShardOutput& out,
                                   uint64_t shuffle_seed = 0, uint64_t* ignored_files = nullptr);

}  // namespace lockstep::data
