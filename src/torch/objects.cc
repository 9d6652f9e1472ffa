// Bytes, module and optimizer state, and metric sums across ranks.
#include "lockstep/torch/objects.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/metrics.h"
#include "torch/byte_tensor.h"
#include "torch/collectives_internal.h"

namespace lockstep::torch {
namespace detail {

::torch::Tensor bytes_tensor(const std::string& bytes) {
  auto t = ::torch::empty({static_cast<int64_t>(bytes.size())}, ::torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_bytes(const ::torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

}  // namespace detail

std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name,
                            int process_set) {
  if (size() == 1) return bytes;
  auto length = ::torch::tensor({static_cast<int64_t>(bytes.size())}, ::torch::kInt64);
  broadcast_(length, root, name + ".size", process_set);  // refuses a root outside the set
  // root counts within the set, as for every lockstep collective.
  const bool is_root = detail::place_in_set(process_set, name + ".rank").rank == root;
  auto payload = is_root ? detail::bytes_tensor(bytes)
                         : ::torch::empty({length.item<int64_t>()}, ::torch::kUInt8);
  broadcast_(payload, root, name + ".bytes", process_set);
  return detail::tensor_bytes(payload);
}

std::vector<std::string> allgather_bytes(const std::string& bytes, const std::string& name,
                                         int process_set) {
  if (size() == 1) return {bytes};
  auto lengths = allgather(::torch::tensor({static_cast<int64_t>(bytes.size())}, ::torch::kInt64),
                           name + ".size", process_set);
  auto payload = allgather(detail::bytes_tensor(bytes), name + ".bytes", process_set);
  std::vector<std::string> out;
  int64_t offset = 0;
  for (int64_t r = 0; r < lengths.numel(); ++r) {
    int64_t n = lengths[r].item<int64_t>();
    out.push_back(detail::tensor_bytes(payload.narrow(0, offset, n).contiguous()));
    offset += n;
  }
  return out;
}

// ---- module and optimizer state

void broadcast_parameters(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                          int root) {
  if (size() == 1) return;
  ::torch::NoGradGuard no_grad;
  std::vector<TensorHandle> handles;
  for (const auto& [name, tensor] : named) {
    if (tensor.numel() > 0 && (!tensor.has_storage() || tensor.storage().data() == nullptr))
      throw InvalidArgument(fmt::format(
          "broadcast_parameters: {} holds no memory: it is sharded by a FullyShardedModel, which "
          "broadcast rank 0's values at its construction; drop this call after the wrap",
          name));
    ::torch::Tensor data = tensor;  // shares storage; in place on the parameter
    handles.push_back(broadcast_async_(data, root, "bcast." + name));
  }
  for (auto& h : handles) h.wait();
}

void broadcast_parameters(::torch::nn::Module& module, int root) {
  std::vector<std::pair<std::string, ::torch::Tensor>> named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) named.emplace_back(item.key(), item.value());
  broadcast_parameters(named, root);
}

std::string archive_to_bytes(::torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  return bytes;
}

void archive_from_bytes(::torch::serialize::InputArchive& archive, const std::string& bytes) {
  archive.load_from(bytes.data(), bytes.size());
}

void save_optimizer(const ::torch::optim::Optimizer& optimizer,
                    ::torch::serialize::OutputArchive& archive) {
  ::torch::serialize::OutputArchive state;
  optimizer.save(state);
  archive.write("optimizer", state);
  const auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::OutputArchive options;
    groups[i].options().serialize(options);
    archive.write(fmt::format("group_options.{}", i), options);
  }
}

void load_optimizer(::torch::optim::Optimizer& optimizer,
                    ::torch::serialize::InputArchive& archive) {
  ::torch::serialize::InputArchive state;
  archive.read("optimizer", state);
  optimizer.state().clear();  // load() merges: state the archive lacks would stay
  optimizer.load(state);
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::InputArchive options;
    archive.read(fmt::format("group_options.{}", i), options);
    groups[i].options().serialize(options);
  }
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root) {
  if (size() == 1) return;
  std::string bytes;
  if (rank() == root) {
    ::torch::serialize::OutputArchive archive;
    save_optimizer(optimizer, archive);
    bytes = archive_to_bytes(archive);
  }
  bytes = broadcast_bytes(bytes, root, "bcast.optimizer_state");
  if (rank() == root) return;
  ::torch::serialize::InputArchive archive;
  archive_from_bytes(archive, bytes);
  load_optimizer(optimizer, archive);
}

// ---- metrics

std::vector<double> sum_across_ranks(const std::vector<double>& values, const std::string& name) {
  if (size() == 1 || values.empty()) return values;
  auto t = ::torch::tensor(values, ::torch::kFloat64);
  allreduce_(t, name, {.op = ReduceOp::kSum});
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

double Tally::global_value(const std::string& name) const {
  auto sums = sum_across_ranks({numerator_, denominator_}, name);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace lockstep::torch
