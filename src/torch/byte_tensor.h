// Bytes as a kUInt8 tensor and back: how objects.cc moves strings through
// the tensor collectives and elastic.cc keeps byte blobs in a torch archive.
// Defined once in objects.cc. Pure functions, thread-safe.
#pragma once

#include <torch/torch.h>

#include <string>

namespace lockstep::torch::detail {

// A new CPU kUInt8 tensor holding `bytes` (empty for an empty string).
::torch::Tensor bytes_tensor(const std::string& bytes);

// The bytes of a kUInt8 tensor (made contiguous first).
std::string tensor_bytes(const ::torch::Tensor& t);

}  // namespace lockstep::torch::detail
