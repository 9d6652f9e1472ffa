// Data sets the benchmark builds in its work folder.
#pragma once

#include <string>

namespace lockstep::bench {

// Fashion-MNIST train converted to shards when `mnist_dir` has it, else
// `records` synthetic 28x28 raw records. Returns the index path.
std::string make_idx_shards(const std::string& work_dir, const std::string& mnist_dir,
                            size_t records);
// `count` JPEGs of size x size (smooth pattern plus noise, quality 90).
std::string make_jpeg_shards(const std::string& work_dir, size_t count, int size);

}  // namespace lockstep::bench
