// One safetensors file of LibTorch tensors (lockstep/torch/safetensors.h).
#include "lockstep/torch/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "lockstep/base/error.h"
#include "torch/checkpoint_temps.h"

namespace lockstep::torch {
namespace {

struct DtypePair {
  SafetensorsDtype file;
  ::torch::ScalarType tensor;
};
constexpr std::array<DtypePair, kSafetensorsDtypeCount> kDtypes{{
    {SafetensorsDtype::F64, ::torch::kDouble},
    {SafetensorsDtype::F32, ::torch::kFloat},
    {SafetensorsDtype::F16, ::torch::kHalf},
    {SafetensorsDtype::BF16, ::torch::kBFloat16},
    {SafetensorsDtype::I64, ::torch::kLong},
    {SafetensorsDtype::I32, ::torch::kInt},
    {SafetensorsDtype::I16, ::torch::kShort},
    {SafetensorsDtype::I8, ::torch::kChar},
    {SafetensorsDtype::U8, ::torch::kByte},
    {SafetensorsDtype::BOOL, ::torch::kBool},
}};

// Closes the descriptor however the scope ends.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The CPU, contiguous, plain bytes of `t` (a copy only where needed).
::torch::Tensor host_bytes(const ::torch::Tensor& t) {
  return t.detach().to(::torch::kCPU).resolve_neg().contiguous();
}

// Streams the header and then each tensor, copied to the host one at a time.
void write_file(int fd, const std::string& path, const NamedTensors& tensors,
                const SafetensorsLayout& layout) {
  write_all_to_fd(fd, layout.prefix.data(), layout.prefix.size(), path);
  for (size_t i : layout.data_order) {
    ::torch::Tensor t = host_bytes(tensors[i].second);
    const SafetensorsEntry& e = layout.entries[i];
    if (t.nbytes() != e.end - e.begin)
      throw Error(fmt::format("safetensors: tensor '{}' has {} bytes, its header entry {} (a bug)",
                              e.name, t.nbytes(), e.end - e.begin));
    write_all_to_fd(fd, t.data_ptr(), t.nbytes(), path);
  }
}

// BOOL bytes other than 0 and 1 are not a valid kBool tensor.
void check_bool_bytes(const ::torch::Tensor& t, const std::string& name, const std::string& path) {
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (bytes[i] > 1)
      throw Error(
          fmt::format("safetensors: {}: BOOL tensor '{}' holds byte {} at element {}; BOOL "
                      "bytes must be 0 or 1 (the file is corrupt)",
                      path, name, bytes[i], i));
}

}  // namespace

SafetensorsDtype safetensors_dtype_of(const ::torch::Tensor& tensor, const std::string& name) {
  if (!tensor.defined())
    throw InvalidArgument(fmt::format("safetensors: tensor '{}' is undefined", name));
  if (tensor.layout() != ::torch::kStrided || tensor.is_quantized())
    throw InvalidArgument(fmt::format(
        "safetensors: tensor '{}' is {}, but safetensors holds only dense tensors (call "
        "to_dense() or dequantize() first)",
        name, tensor.is_quantized() ? "quantized" : "sparse"));
  for (const DtypePair& p : kDtypes)
    if (p.tensor == tensor.scalar_type()) return p.file;
  throw InvalidArgument(fmt::format(
      "safetensors: tensor '{}' has dtype {}, which lockstep does not write (supported: float64, "
      "float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool; torch::view_as_real "
      "turns a complex tensor into a float one)",
      name, c10::toString(tensor.scalar_type())));
}

::torch::ScalarType scalar_type_of(SafetensorsDtype dtype) {
  return kDtypes.at(static_cast<size_t>(dtype)).tensor;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors)
    entries.push_back({name, safetensors_dtype_of(t, name), t.sizes().vec(), 0, 0});
  SafetensorsLayout layout = plan_safetensors(entries, metadata);
  detail::write_atomically(path, [&](int fd, const std::string& temp_path) {
    write_file(fd, temp_path, tensors, layout);
  });
}

SafetensorsContents load_safetensors(const std::string& path) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0)
    throw Error(fmt::format("safetensors: cannot open {}: {}", path, std::strerror(errno)));
  SafetensorsHeader header = read_safetensors_header(file.fd, path);
  SafetensorsContents out;
  out.metadata = std::move(header.metadata);
  out.tensors.reserve(header.entries.size());
  for (const SafetensorsEntry& e : header.entries) {
    // The header's spans tile the file's data, so these add up to its size.
    ::torch::Tensor t = ::torch::empty(e.shape, ::torch::dtype(scalar_type_of(e.dtype)));
    read_all_at(file.fd, t.data_ptr(), e.end - e.begin, header.data_start + e.begin, path);
    if (e.dtype == SafetensorsDtype::BOOL) check_bool_bytes(t, e.name, path);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

std::vector<TensorInfo> read_safetensors_info(const std::string& path) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0)
    throw Error(fmt::format("safetensors: cannot open {}: {}", path, std::strerror(errno)));
  std::vector<TensorInfo> infos;
  for (SafetensorsEntry& e : read_safetensors_header(file.fd, path).entries)
    infos.push_back({std::move(e.name), scalar_type_of(e.dtype), std::move(e.shape)});
  return infos;
}

}  // namespace lockstep::torch
