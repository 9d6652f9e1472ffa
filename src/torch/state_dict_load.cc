// Weights files of any format into and out of a module (state_dict.h).
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "lockstep/base/error.h"
#include "lockstep/torch/safetensors.h"
#include "lockstep/torch/state_check.h"
#include "lockstep/torch/state_dict.h"
#include "torch/module_archive.h"
#include "torch/zip_check.h"

namespace lockstep::torch {
namespace {

// Module::save nests one archive per child module: "fc" holds "weight".
NamedTensors read_checkpoint_model(const std::string& path) {
  try {
    ::torch::serialize::InputArchive archive, model;
    archive.load_from(path);
    if (!archive.try_read("model", model))
      throw Error(
          fmt::format("{} is a LibTorch archive without a 'model' entry: not a lockstep "
                      "checkpoint (save_checkpoint writes one)",
                      path));
    NamedTensors out;
    detail::module_archive_tensors(model, "", out);
    return out;
  } catch (const c10::Error& e) {
    throw Error(fmt::format("{} is not a readable lockstep checkpoint: {}", path,
                            e.what_without_backtrace()));
  }
}

std::string head_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  std::string head(n, '\0');
  in.read(head.data(), static_cast<std::streamsize>(n));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

std::vector<TensorInfo> weights_infos(const NamedTensors& tensors) {
  std::vector<TensorInfo> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.scalar_type(), t.sizes().vec()});
  return out;
}

}  // namespace

const char* format_name(WeightsFormat format) {
  switch (format) {
    case WeightsFormat::kTorchSave: return "torch.save state_dict";
    case WeightsFormat::kSafetensors: return "safetensors";
    case WeightsFormat::kLockstepCheckpoint: return "lockstep checkpoint";
  }
  return "?";
}

WeightsFormat detect_weights_format(const std::string& path) {
  const std::string head = head_bytes(path, 9);
  if (head.rfind("PK\x03\x04", 0) == 0) {
    for (const auto& [name, size] : detail::checked_zip_records(path, /*stored_only=*/false)) {
      size_t slash = name.find('/');
      if (slash != std::string::npos && name.substr(slash) == "/constants.pkl")
        return WeightsFormat::kLockstepCheckpoint;
    }
    return WeightsFormat::kTorchSave;
  }
  if (head.size() == 9 && head[8] == '{') return WeightsFormat::kSafetensors;
  if (head.rfind("\x80\x02\x8a\x0a", 0) == 0)  // a pickle's first opcode: the legacy magic number
    throw Error(
        fmt::format("{} is a legacy torch.save file (PyTorch < 1.6, or "
                    "_use_new_zipfile_serialization=False), which is not read: re-save it "
                    "with torch.save(torch.load(f), g) in PyTorch >= 1.6",
                    path));
  throw Error(
      fmt::format("{} is neither a torch.save file, a lockstep checkpoint (zip archives) "
                  "nor a safetensors file (8-byte length, then a JSON header)",
                  path));
}

WeightsFormat format_for_extension(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".safetensors") return WeightsFormat::kSafetensors;
  if (ext == ".pt" || ext == ".pth" || ext == ".bin") return WeightsFormat::kTorchSave;
  throw InvalidArgument(
      fmt::format("{}: write weights to a .safetensors or .pt/.pth/.bin file "
                  "(the extension picks the format)",
                  path));
}

NamedTensors read_weights(const std::string& path) {
  switch (detect_weights_format(path)) {
    case WeightsFormat::kTorchSave: return read_torch_state_dict(path);
    case WeightsFormat::kSafetensors: return load_safetensors(path).tensors;
    case WeightsFormat::kLockstepCheckpoint: return read_checkpoint_model(path);
  }
  return {};
}

void write_weights(const std::string& path, const NamedTensors& tensors) {
  if (format_for_extension(path) == WeightsFormat::kSafetensors)
    save_safetensors(path, tensors);
  else
    write_torch_state_dict(path, tensors);
}

NamedTensors state_dict(const ::torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace_back(p.key(), p.value().detach());
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    out.emplace_back(b.key(), b.value().detach());
  return out;
}

void load_state_dict(const std::string& path, ::torch::nn::Module& module) {
  const NamedTensors found = read_weights(path);
  check_state_matches(tensor_infos(module), weights_infos(found), path);  // throws before any copy
  std::map<std::string, ::torch::Tensor> by_name(found.begin(), found.end());
  ::torch::NoGradGuard no_grad;
  for (auto& [name, target] : state_dict(module)) target.copy_(by_name.at(name));
}

void save_state_dict(const std::string& path, const ::torch::nn::Module& module) {
  write_weights(path, state_dict(module));
}

}  // namespace lockstep::torch
