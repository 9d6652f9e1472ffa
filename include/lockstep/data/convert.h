// Converters from common dataset layouts to a data set in any of the three
// formats of source.h (record shards + index, HDF5, LMDB), and between those
// formats. Used by `lockstep convert`; no LibTorch. Each call is
// single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/data/source.h"

namespace lockstep::data {

// Called after each record: records done, records in total, bytes written.
using ProgressFn = std::function<void(uint64_t done, uint64_t total, uint64_t bytes)>;

struct ShardOutput {
  std::string dir;  // created if missing
  // records: <name>-0000k-of-0000N.tfrecord + <name>.index.json;
  // hdf5: <name>.h5 (1 shard) or <name>-0000k-of-0000N.h5 (datasets /images,
  //   /labels; chunked, Fletcher-32 checksummed); lmdb: the folder <name>.lmdb
  //   (one environment whatever `shards` says; keys are %010d record numbers).
  std::string name;
  size_t shards = 4;
  ProgressFn progress;  // may be empty
  SourceFormat format = SourceFormat::kRecords;
};

struct ConvertResult {
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::string index_path;          // the index, the first HDF5 file or the LMDB folder
  std::vector<std::string> paths;  // all of it, as SourceSpec::paths (every HDF5 file)
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
// the loader shuffles blocks of consecutive records). Throws Error for a
// file whose content is not JPEG/PNG; other files are counted in
// *ignored_files (when given) and left out.
ConvertResult convert_image_folder(const std::string& root, const ShardOutput& out,
                                   uint64_t shuffle_seed = 0, uint64_t* ignored_files = nullptr);

// Any data set (source.h) to `out.format`, record by record in shard order;
// every feature of a record/LMDB Example is kept, HDF5 rows become raw-pixel
// Examples. Throws Error/BadRecord naming the record that cannot be written.
ConvertResult convert_dataset(const SourceSpec& in, const ShardOutput& out);

}  // namespace lockstep::data
