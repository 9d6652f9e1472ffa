// Hugging Face's sharded safetensors layout (lockstep/torch/safetensors.h):
// shard files plus <prefix>.safetensors.index.json naming each tensor's file.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/safetensors.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;
// std::map underneath (ordered_json finds keys by a linear scan: quadratic
// for an index of many tensors); the order comes from the shards instead.
using Json = nlohmann::json;

[[noreturn]] void bad_index(const std::string& path, const std::string& what) {
  throw Error(
      fmt::format("safetensors index {}: {} (re-export the model, or fix the index)", path, what));
}

uint64_t tensor_bytes(const ::torch::Tensor& t) {
  return static_cast<uint64_t>(t.numel()) * t.element_size();
}

// Consecutive runs of tensors of at most max_bytes each (a larger tensor alone).
std::vector<NamedTensors> split_shards(const NamedTensors& tensors, uint64_t max_bytes) {
  std::vector<NamedTensors> shards;
  uint64_t filled = 0;
  for (const auto& named : tensors) {
    uint64_t bytes = tensor_bytes(named.second);
    if (shards.empty() || (filled > 0 && filled + bytes > max_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(named);
    filled += bytes;
  }
  return shards;
}

Json read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("safetensors: cannot open index {}", path));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    Json index = Json::parse(text.str());
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      bad_index(path, "it is not an object with a \"weight_map\" object");
    return index;
  } catch (const Json::exception& e) {
    bad_index(path, fmt::format("it is not JSON ({})", e.what()));
  }
}

// The index's string metadata; a numeric "total_size" is checked by the caller.
std::map<std::string, std::string> index_metadata(const Json& index, const std::string& path) {
  std::map<std::string, std::string> metadata;
  if (!index.contains("metadata")) return metadata;
  if (!index["metadata"].is_object()) bad_index(path, "\"metadata\" is not an object");
  for (const auto& [key, value] : index["metadata"].items())
    if (value.is_string()) metadata.emplace(key, value.get<std::string>());
  return metadata;
}

// A shard name is a plain file name: an index must not reach outside its directory.
std::string shard_name(const Json& value, const std::string& tensor, const std::string& path) {
  if (!value.is_string()) bad_index(path, fmt::format("tensor '{}' maps to a non-string", tensor));
  std::string name = value.get<std::string>();
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    bad_index(path,
              fmt::format("tensor '{}' maps to '{}', not a file name in the index's directory",
                          tensor, name));
  return name;
}

void check_total_size(const Json& index, uint64_t total, const std::string& path) {
  if (!index.contains("metadata") || !index["metadata"].contains("total_size")) return;
  const Json& size = index["metadata"]["total_size"];
  if (size.is_number_unsigned() && size.get<uint64_t>() == total) return;
  bad_index(path, fmt::format("\"total_size\" {} disagrees with the {} bytes of its tensors",
                              size.dump(), total));
}

}  // namespace

void save_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                              uint64_t max_shard_bytes,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& prefix) {
  if (max_shard_bytes == 0)
    throw InvalidArgument("save_safetensors_sharded: max_shard_bytes is 0; pass a positive size");
  std::set<std::string_view> names;
  for (const auto& named : tensors) {
    safetensors_dtype_of(named.second, named.first);  // refuses before any file is written
    if (!names.insert(named.first).second)
      throw InvalidArgument(
          fmt::format("save_safetensors_sharded: two tensors are named '{}'", named.first));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(fmt::format("save_safetensors_sharded: cannot create {}: {}", dir, ec.message()));
  std::vector<NamedTensors> shards = split_shards(tensors, max_shard_bytes);
  Json index = {{"metadata", Json::object()}, {"weight_map", Json::object()}};
  for (const auto& [key, value] : metadata) index["metadata"][key] = value;
  uint64_t total = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    std::string file = fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, k + 1, shards.size());
    save_safetensors((fs::path(dir) / file).string(), shards[k], metadata);
    for (const auto& [name, t] : shards[k]) {
      index["weight_map"][name] = file;
      total += tensor_bytes(t);
    }
  }
  index["metadata"]["total_size"] = total;
  write_file_atomically((fs::path(dir) / (prefix + ".safetensors.index.json")).string(),
                        index.dump(2) + "\n");
}

SafetensorsContents load_safetensors_sharded(const std::string& index_json_path) {
  Json index = read_index(index_json_path);
  fs::path dir = fs::path(index_json_path).parent_path();
  std::map<std::string, std::string> wanted;  // tensor -> its shard file
  std::map<std::string, NamedTensors> files;  // by name: 00001-of-n first
  for (const auto& [tensor, value] : index["weight_map"].items()) {
    std::string file = shard_name(value, tensor, index_json_path);
    wanted.emplace(tensor, file);
    files.try_emplace(file);
  }
  // Shards in order, each in its header's order: the order they were saved in.
  SafetensorsContents out;
  out.metadata = index_metadata(index, index_json_path);
  uint64_t total = 0;
  for (auto& [file, named] : files) {
    named = load_safetensors((dir / file).string()).tensors;
    for (auto& [name, t] : named) {
      auto it = wanted.find(name);
      if (it == wanted.end() || it->second != file)
        bad_index(index_json_path,
                  fmt::format("shard {} holds tensor '{}', which the index does not "
                              "map to it",
                              file, name));
      total += tensor_bytes(t);
      out.tensors.emplace_back(name, std::move(t));
      wanted.erase(it);
    }
  }
  if (!wanted.empty())
    bad_index(index_json_path, fmt::format("tensor '{}' is not in its shard {}",
                                           wanted.begin()->first, wanted.begin()->second));
  check_total_size(index, total, index_json_path);
  return out;
}

}  // namespace lockstep::torch
