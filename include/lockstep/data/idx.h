// Reader for IDX files (the MNIST / Fashion-MNIST format), plain or gzip'd.
// Needs no LibTorch: callers wrap the bytes in tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

struct IdxArray {
  std::vector<uint32_t> dims;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> bytes;  // row-major, unsigned bytes (the only type MNIST uses)
  size_t count() const { return dims.empty() ? 0 : dims[0]; }
  size_t item_size() const;  // product of dims[1..]
};

// Reads an unsigned-byte IDX file (.gz or raw, detected by magic). Throws
// lockstep::Error naming the file and the problem (missing, truncated,
// unsupported element type, size mismatch).
IdxArray read_idx(const std::string& path);

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct MnistSplit {
  IdxArray images;  // N x 28 x 28
  IdxArray labels;  // N
};
// Loads "train" or "t10k" from `dir`; a missing directory gets an error that
// names the Debian package to install.
MnistSplit load_mnist_split(const std::string& dir, const std::string& split);

}  // namespace lockstep::data
