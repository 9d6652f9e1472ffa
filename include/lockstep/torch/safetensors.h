// safetensors files of LibTorch tensors: the weight format of the Hugging Face
// ecosystem, readable by Python without pickle (docs/interop.md, "safetensors").
// The format and its checks are lockstep/base/safetensors.h.
//
// Saving writes each tensor contiguous, row-major, little-endian, copied to
// the CPU one tensor at a time (a GPU or non-contiguous tensor costs one
// tensor's copy, never the model's), streamed into a temporary file that is
// fsync'ed and renamed over `path` (the scheme of write_file_atomically,
// lockstep/torch/checkpoint.h): a crash leaves the old file or the new one.
// Loading checks the whole header against the file's size before it
// allocates anything, then reads each tensor straight into a tensor it owns:
// a hostile header cannot make it allocate more than the file holds.
//
// Stateless functions; thread-safe for different paths. Collective-free: call
// them on the rank that should write or read.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/base/safetensors.h"
#include "lockstep/torch/state_check.h"

namespace lockstep::torch {

// Tensors under their names, in order (a state_dict's order is kept).
using NamedTensors = std::vector<std::pair<std::string, ::torch::Tensor>>;

struct SafetensorsContents {
  NamedTensors tensors;  // in the header's order (the order they were saved in by lockstep)
  std::map<std::string, std::string> metadata;
};

// Dtypes: kDouble F64, kFloat F32, kHalf F16, kBFloat16 BF16, kLong I64,
// kInt I32, kShort I16, kChar I8, kByte U8, kBool BOOL. Anything else
// (complex, quantized, sparse, undefined) is refused naming the tensor.
SafetensorsDtype safetensors_dtype_of(const ::torch::Tensor& tensor, const std::string& name);
::torch::ScalarType scalar_type_of(SafetensorsDtype dtype);

// Throws lockstep::InvalidArgument for an unsupported tensor or a duplicate
// name (before anything is written), lockstep::Error on I/O failure.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Throws lockstep::Error naming the path and the problem for an unreadable,
// truncated or malformed file, and for a BOOL tensor holding a byte other
// than 0 or 1.
SafetensorsContents load_safetensors(const std::string& path);

// Only the header: names, dtypes and shapes, to check a file against a model
// (check_state_matches) before loading anything.
std::vector<TensorInfo> read_safetensors_info(const std::string& path);

// Hugging Face's sharded layout in `dir` (created if missing):
// <prefix>-00001-of-0000n.safetensors ... with at most `max_shard_bytes` of
// tensor data each (a tensor larger than that gets a shard of its own), each
// carrying `metadata`, and <prefix>.safetensors.index.json =
// {"metadata": {metadata..., "total_size": <data bytes>}, "weight_map":
// {tensor: file}}, written last. Shards are filled in the tensors' order.
void save_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                              uint64_t max_shard_bytes,
                              const std::map<std::string, std::string>& metadata = {},
                              const std::string& prefix = "model");

// Loads every tensor the index lists, shard by shard in file-name order and
// each shard in its header's order (the order they were saved in), with the
// index's string metadata. Refuses a shard file name outside the index's
// directory, a tensor the index lists but its file lacks (and the reverse),
// and a "total_size" that disagrees with the tensors.
SafetensorsContents load_safetensors_sharded(const std::string& index_json_path);

}  // namespace lockstep::torch
