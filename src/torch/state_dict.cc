// torch.save(state_dict) files: the zip through LibTorch's
// PyTorchStreamReader/Writer, the pickle through state_dict_pickle.h.
#include "lockstep/torch/state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>

#include <map>
#include <memory>

#include "lockstep/base/error.h"
#include "lockstep/torch/checkpoint.h"
#include "torch/state_dict_pickle.h"
#include "torch/zip_check.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "torch.save storages are little-endian and read as they lie");

namespace lockstep::torch {
namespace {

using Records = std::map<std::string, uint64_t>;

// "<name>/" of the record <name>/data.pkl (PyTorchStreamReader's archive name).
std::string archive_prefix(const Records& records, const std::string& path) {
  for (const auto& [name, size] : records) {
    size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0)
      return name.substr(0, slash + 1);
  }
  throw Error(fmt::format("{} is a zip without <name>/data.pkl: not a torch.save file", path));
}

std::string record_text(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

// One storage as a flat tensor that owns the record's bytes.
::torch::Tensor read_storage(caffe2::serialize::PyTorchStreamReader& reader,
                             const detail::PickledTensor& t, const Records& records,
                             const std::string& prefix, const std::string& path) {
  const std::string record = "data/" + t.storage_key;
  auto it = records.find(prefix + record);
  if (it == records.end())
    throw Error(
        fmt::format("{}: tensor '{}' names storage '{}', which the zip lacks (record "
                    "{}{}): the file is damaged",
                    path, t.name, t.storage_key, prefix, record));
  const unsigned __int128 want =
      static_cast<unsigned __int128>(t.storage_numel) * detail::element_size(t.dtype);
  if (want != it->second)
    throw Error(fmt::format(
        "{}: storage '{}' holds {} bytes, but the pickle says {} elements of "
        "{} bytes: the file is damaged",
        path, t.storage_key, it->second, t.storage_numel, detail::element_size(t.dtype)));
  auto record_data = reader.getRecord(record);
  auto owner = std::make_shared<at::DataPtr>(std::move(std::get<0>(record_data)));
  void* bytes = owner->get();
  return ::torch::from_blob(
      bytes, {t.storage_numel}, [owner](void*) mutable { owner.reset(); },
      ::torch::TensorOptions().dtype(t.dtype));
}

NamedTensors read_zip(const std::string& path) {
  const Records records = detail::checked_zip_records(path);
  const std::string prefix = archive_prefix(records, path);
  caffe2::serialize::PyTorchStreamReader reader(path);
  if (records.count(prefix + "byteorder") && record_text(reader, "byteorder") != "little")
    throw Error(
        fmt::format("{} holds big-endian storages, which lockstep does not read (save it "
                    "on a little-endian machine)",
                    path));
  std::vector<detail::PickledTensor> pickled =
      detail::unpickle_state_dict(record_text(reader, "data.pkl"), path);
  std::map<std::string, ::torch::Tensor> storages;  // views of one storage share it
  NamedTensors out;
  for (const detail::PickledTensor& t : pickled) {
    auto [it, fresh] = storages.try_emplace(t.storage_key);
    if (fresh) it->second = read_storage(reader, t, records, prefix, path);
    if (it->second.scalar_type() != t.dtype || it->second.numel() != t.storage_numel)
      throw Error(
          fmt::format("{}: storage '{}' is named with two dtypes or sizes", path, t.storage_key));
    out.emplace_back(t.name, it->second.as_strided(t.sizes, t.strides, t.offset));
  }
  return out;
}

}  // namespace

NamedTensors read_torch_state_dict(const std::string& path) {
  try {
    return read_zip(path);
  } catch (const c10::Error& e) {  // the zip layer (miniz) found what the directory check did not
    throw Error(
        fmt::format("{} is not a readable torch.save file: {}", path, e.what_without_backtrace()));
  }
}

void write_torch_state_dict(const std::string& path, const NamedTensors& tensors) {
  std::vector<detail::PickledTensor> pickled;
  std::vector<::torch::Tensor> data;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw InvalidArgument(fmt::format("tensor '{}' is undefined", name));
    detail::storage_class(tensor.scalar_type());  // refuses a dtype the format lacks, by name
    data.push_back(tensor.detach().to(::torch::kCPU).contiguous());
    detail::PickledTensor t;
    t.name = name;
    t.storage_key = std::to_string(pickled.size());
    t.dtype = tensor.scalar_type();
    t.storage_numel = tensor.numel();
    t.sizes = tensor.sizes().vec();
    t.strides = data.back().strides().vec();
    pickled.push_back(std::move(t));
  }
  std::string bytes;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&bytes](const void* buf, size_t n) {
      bytes.append(static_cast<const char*>(buf), n);
      return n;
    });
    const std::string pickle = detail::pickle_state_dict(pickled);
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (size_t k = 0; k < data.size(); ++k)
      writer.writeRecord("data/" + pickled[k].storage_key, data[k].data_ptr(), data[k].nbytes());
    writer.writeEndOfFile();
  }
  write_file_atomically(path, bytes);
}

}  // namespace lockstep::torch
