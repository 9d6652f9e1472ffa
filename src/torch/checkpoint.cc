#include "lockstep/torch/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/state_check.h"
#include "lockstep/torch/state_layout.h"
#include "torch/checkpoint_temps.h"
#include "torch/module_archive.h"

namespace lockstep::torch {
namespace {

constexpr int64_t kFormatVersion = 1;

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(
      fmt::format("checkpoint: {} {}: {} (check the directory exists, is writable and "
                  "has space)",
                  what, path, std::strerror(errno)));
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error("cannot write", path);
    done += static_cast<size_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open directory", dir);
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_error("cannot fsync directory", dir);
  }
  ::close(fd);
}

::torch::Tensor generator_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const ::torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error("cannot open", path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A module that holds a slice of its state here (lockstep/torch/state_layout.h):
// one rank's file of it would be a slice that loads as another model.
void require_whole(const ::torch::nn::Module& module, const char* call, const std::string& path) {
  auto partial = partial_state_of(module);
  if (!partial) return;
  const std::string name = partial->name.empty() ? "(the model)" : partial->name;
  if (partial->marked)
    throw InvalidArgument(fmt::format(
        "{} {}: module '{}' is trained as part of a model laid out across ranks (a pipeline "
        "stage's layer: each rank trains only its stage's); this call reads and writes whole "
        "tensors of one rank: use {} (every rank)",
        call, path, name, partial->call));
  throw InvalidArgument(fmt::format(
      "{} {}: module '{}' holds only this rank's slice of its parameters (a sharded layer); "
      "this call reads and writes whole tensors of one rank: use {} (every rank)",
      call, path, name, partial->call));
}

// A parameter whose memory is not there (a FullyShardedModel releases its
// units between uses): saving it would write an empty tensor that fails only
// at resume, maybe days later.
void require_materialized(const ::torch::nn::Module& module, const char* call,
                          const std::string& path) {
  for (const auto& item : module.named_parameters()) {
    const ::torch::Tensor& p = item.value();
    if (!p.defined() || p.numel() == 0 || p.is_sparse()) continue;
    const auto needed = static_cast<size_t>(p.storage_offset() + p.numel()) * p.element_size();
    if (p.has_storage() && p.storage().nbytes() >= needed) continue;
    throw InvalidArgument(fmt::format(
        "{} {}: parameter '{}' holds no memory: the model is held by a FullyShardedModel, "
        "which keeps only this rank's shard; pass the FullyShardedModel instead: "
        "lockstep::parallel::save_checkpoint/load_checkpoint(path, fsdp, optimizer, progress), "
        "or CheckpointWriter::save(fsdp, ...)/load_checkpoint_dir(root, fsdp, ...) (every rank)",
        call, path, item.key()));
  }
}

}  // namespace

void detail::write_atomically(
    const std::string& path,
    const std::function<void(int fd, const std::string& temp_path)>& write) {
  namespace fs = std::filesystem;
  fs::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  detail::LockedTemp temp = detail::create_locked_temp(path);
  try {
    write(temp.fd, temp.path);
    if (::fsync(temp.fd) != 0) io_error("cannot fsync", temp.path);
    if (::rename(temp.path.c_str(), path.c_str()) != 0)
      io_error("cannot rename the temporary file onto", path);
  } catch (...) {
    ::unlink(temp.path.c_str());
    ::close(temp.fd);
    throw;
  }
  ::close(temp.fd);  // after the rename: the lock guards the temp file's whole life
  fsync_directory(dir);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  detail::write_atomically(
      path, [&](int fd, const std::string& temp_path) { write_all(fd, bytes, temp_path); });
}

uint64_t remove_stale_temporary_files(const std::string& path) {
  return detail::remove_stale_temps(path).files;
}

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const ::torch::optim::Optimizer& optimizer, const TrainingProgress& progress) {
  detail::require_whole_state(module, "save_checkpoint", path);
  if (rank() != 0) return;
  ::torch::serialize::OutputArchive archive, model, optim;
  module.save(model);
  save_optimizer(optimizer, optim);
  archive.write("format_version", c10::IValue(kFormatVersion));
  archive.write("model", model);
  archive.write("optimizer", optim);
  archive.write("epoch", c10::IValue(progress.epoch));
  archive.write("step", c10::IValue(progress.step));
  archive.write("sampler", c10::IValue(progress.sampler));
  archive.write("user", c10::IValue(progress.user));
  archive.write("rng", generator_state());
  write_file_atomically(path, archive_to_bytes(archive));
}

namespace {

using NamedTensorList = std::vector<std::pair<std::string, ::torch::Tensor>>;

// A lockstep checkpoint read and parsed; nothing of it applied yet.
struct FileContents {
  NamedTensorList tensors;  // the model's parameters and buffers, dotted names
  ::torch::serialize::InputArchive optimizer;
  TrainingProgress progress;
  ::torch::Tensor rng;
};

std::string not_a_checkpoint(const std::string& path, const std::string& bytes,
                             const std::string& cause = {}) {
  const std::string what = file_kind(bytes);
  if (what == "a safetensors file" || what == "a PyTorch torch.save file")
    return fmt::format(
        "checkpoint {} is {}, not a lockstep checkpoint: load its weights with "
        "lockstep::torch::load_state_dict(path, module), or convert it with "
        "`lockstep convert checkpoint {} OUT.pt`",
        path, what, path);
  return fmt::format(
      "checkpoint {} is {}, not a lockstep checkpoint (written by "
      "lockstep::torch::save_checkpoint){}; point the load at a checkpoint file",
      path, what, cause.empty() ? "" : " (LibTorch: " + cause + ")");
}

FileContents parse_checkpoint(const std::string& path, const std::string& bytes) {
  FileContents file;
  ::torch::serialize::InputArchive archive, model;
  try {
    archive_from_bytes(archive, bytes);
  } catch (const c10::Error& e) {
    throw Error(not_a_checkpoint(path, bytes, e.what_without_backtrace()));
  }
  c10::IValue value;
  if (!archive.try_read("format_version", value) || !value.isInt())
    throw Error(not_a_checkpoint(path, bytes));
  if (value.toInt() != kFormatVersion)
    throw Error(
        fmt::format("checkpoint {}: format version {} is not {} (written by another "
                    "lockstep release: convert it with that release)",
                    path, value.toInt(), kFormatVersion));
  try {
    archive.read("model", model);
    detail::module_archive_tensors(model, "", file.tensors);
    archive.read("optimizer", file.optimizer);
    archive.read("epoch", value);
    file.progress.epoch = value.toInt();
    archive.read("step", value);
    file.progress.step = value.toInt();
    archive.read("sampler", value);
    file.progress.sampler = value.toStringRef();
    archive.read("user", value);
    file.progress.user = value.toStringRef();
    archive.read("rng", file.rng);
  } catch (const c10::Error& e) {
    throw Error(
        fmt::format("checkpoint {} is damaged (a field is missing or of another type: {}); "
                    "load an older checkpoint",
                    path, e.what_without_backtrace()));
  }
  return file;
}

std::vector<TensorInfo> infos_of(const NamedTensorList& tensors) {
  std::vector<TensorInfo> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.scalar_type(), t.sizes().vec()});
  return out;
}

// The optimizer's state from `archive`, or, when that fails part-way, the
// state it held before (so a refused load changes nothing).
void load_optimizer_or_restore(::torch::optim::Optimizer& optimizer,
                               ::torch::serialize::InputArchive& archive, const std::string& path) {
  ::torch::serialize::OutputArchive snapshot;
  save_optimizer(optimizer, snapshot);
  const std::string before = archive_to_bytes(snapshot);
  try {
    load_optimizer(optimizer, archive);
  } catch (const c10::Error& e) {
    ::torch::serialize::InputArchive back;
    archive_from_bytes(back, before);
    load_optimizer(optimizer, back);
    throw Error(
        fmt::format("checkpoint {}: its optimizer state does not fit this optimizer ({}); "
                    "build the optimizer as the run that saved it did (the same type, "
                    "param groups and parameters, in model order); nothing was loaded",
                    path, e.what_without_backtrace()));
  }
}

void copy_into(::torch::nn::Module& module, const NamedTensorList& tensors) {
  std::map<std::string, ::torch::Tensor> by_name(tensors.begin(), tensors.end());
  ::torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) item.value().copy_(by_name.at(item.key()));
  for (auto& item : module.named_buffers()) item.value().copy_(by_name.at(item.key()));
}

}  // namespace

std::string file_kind(const std::string& bytes) {
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) {
    // Both lockstep checkpoints and TorchScript modules hold constants.pkl;
    // torch.save files hold <name>/data.pkl and no code.
    const bool script = bytes.find("constants.pkl") != std::string::npos;
    return script ? "a TorchScript/LibTorch archive" : "a PyTorch torch.save file";
  }
  if (bytes.size() >= 9) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);  // little-endian hosts only (as lockstep)
    if (n > 0 && n <= bytes.size() - 8 && bytes[8] == '{') return "a safetensors file";
  }
  return bytes.empty() ? "empty" : "not a file format lockstep knows";
}

namespace detail {

void module_archive_tensors(::torch::serialize::InputArchive& archive, const std::string& prefix,
                            NamedTensorList& out) {
  for (const std::string& key : archive.keys()) {
    c10::IValue value;
    if (!archive.try_read(key, value)) continue;
    if (value.isTensor()) {
      out.emplace_back(prefix + key, value.toTensor());
    } else if (value.isObject()) {
      ::torch::serialize::InputArchive child;
      archive.read(key, child);
      module_archive_tensors(child, prefix + key + ".", out);
    }  // else the module's `training` flag
  }
}

void require_whole_state(const ::torch::nn::Module& module, const char* call,
                         const std::string& path) {
  require_whole(module, call, path);
  require_materialized(module, call, path);
}

bool load_checkpoint_checked(const std::string& path, ::torch::nn::Module& module,
                             ::torch::optim::Optimizer& optimizer, TrainingProgress& progress,
                             const StateCheckOptions& check) {
  remove_stale_temporary_files(path);  // start-up is when an interrupted write is found
  if (!std::filesystem::exists(path)) return false;
  FileContents file = parse_checkpoint(path, read_file(path));
  check_state_matches(tensor_infos(module), infos_of(file.tensors), "checkpoint " + path, check);
  load_optimizer_or_restore(optimizer, file.optimizer, path);
  copy_into(module, file.tensors);
  progress = file.progress;
  set_generator_state(file.rng);
  return true;
}

}  // namespace detail

bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer, TrainingProgress& progress) {
  require_whole(module, "load_checkpoint", path);
  return detail::load_checkpoint_checked(path, module, optimizer, progress, {});
}

}  // namespace lockstep::torch
