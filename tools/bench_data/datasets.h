// Data sets the benchmark builds in its work folder.
#pragma once

#include <string>
#include <vector>

namespace lockstep::bench {

// Fashion-MNIST train converted to shards when `mnist_dir` has it, else
// `records` synthetic 28x28 raw records. Returns the index path.
std::string make_idx_shards(const std::string& work_dir, const std::string& mnist_dir,
                            size_t records);
// The same data set converted to `format` (hdf5: 4 files; lmdb: one
// environment) next to it; returns the paths to give the pipeline.
std::vector<std::string> convert_to(const std::string& index_path, const std::string& work_dir,
                                    const std::string& format);
// Bytes on disk of a data set (all HDF5 files, the LMDB data.mdb).
uint64_t bytes_on_disk(const std::vector<std::string>& paths);

// `count` JPEGs of size x size (smooth pattern plus noise, quality 90).
std::string make_jpeg_shards(const std::string& work_dir, size_t count, int size);

}  // namespace lockstep::bench
