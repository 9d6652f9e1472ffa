#include "lockstep/torch/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "torch/checkpoint_temps.h"

namespace lockstep::torch {
namespace {

constexpr int64_t kFormatVersion = 1;

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(fmt::format("checkpoint: {} {}: {} (check the directory exists, is writable and "
                          "has space)", what, path, std::strerror(errno)));
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

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  detail::LockedTemp temp = detail::create_locked_temp(path);
  try {
    write_all(temp.fd, bytes, temp.path);
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

uint64_t remove_stale_temporary_files(const std::string& path) {
  return detail::remove_stale_temps(path).files;
}

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const ::torch::optim::Optimizer& optimizer, const TrainingProgress& progress) {
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

bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer, TrainingProgress& progress) {
  remove_stale_temporary_files(path);  // start-up is when an interrupted write is found
  if (!std::filesystem::exists(path)) return false;
  std::string bytes = read_file(path);
  try {
    ::torch::serialize::InputArchive archive, model, optim;
    archive_from_bytes(archive, bytes);
    c10::IValue value;
    archive.read("format_version", value);
    if (value.toInt() != kFormatVersion)
      throw Error(fmt::format("checkpoint {}: format version {} is not {}", path, value.toInt(),
                              kFormatVersion));
    archive.read("model", model);
    module.load(model);
    archive.read("optimizer", optim);
    load_optimizer(optimizer, optim);
    archive.read("epoch", value);
    progress.epoch = value.toInt();
    archive.read("step", value);
    progress.step = value.toInt();
    archive.read("sampler", value);
    progress.sampler = value.toStringRef();
    archive.read("user", value);
    progress.user = value.toStringRef();
    ::torch::Tensor rng;
    archive.read("rng", rng);
    set_generator_state(rng);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("checkpoint {} is unreadable or does not match this model/optimizer: "
                            "{} (delete it or point --checkpoint-dir elsewhere)",
                            path, e.what_without_backtrace()));
  }
  return true;
}

}  // namespace lockstep::torch
