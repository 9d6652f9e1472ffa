// Broadcasting and gathering arbitrary values as bytes, and the state of
// modules and optimizers.
//
// Any value travels if it can be turned into bytes: pass a serialise /
// deserialise pair, or use the overloads for std::string, trivially copyable
// types and vectors of them. Collective: every rank calls with the same name.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace lockstep::torch {

// Root's bytes on every rank (of the process set: a Group's id()). As for
// every lockstep collective, root is a rank WITHIN the set (Group::rank()
// numbering; Horovod takes a global rank there): a root outside [0, set
// size) is an InvalidArgument. Over a set other than the world, one more
// small allgather finds this rank's place in it.
std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name,
                            int process_set = 0);
// Every rank's bytes, in rank order (of the process set).
std::vector<std::string> allgather_bytes(const std::string& bytes, const std::string& name,
                                         int process_set = 0);

// The object forms take the same process_set (root within it).
template <typename T>
T broadcast_object(const T& value, int root, const std::string& name,
                   const std::function<std::string(const T&)>& serialize,
                   const std::function<T(const std::string&)>& deserialize, int process_set = 0) {
  return deserialize(broadcast_bytes(serialize(value), root, name, process_set));
}

template <typename T>
std::vector<T> allgather_object(const T& value, const std::string& name,
                                const std::function<std::string(const T&)>& serialize,
                                const std::function<T(const std::string&)>& deserialize,
                                int process_set = 0) {
  std::vector<T> out;
  for (const std::string& bytes : allgather_bytes(serialize(value), name, process_set))
    out.push_back(deserialize(bytes));
  return out;
}

namespace detail {
template <typename T>
concept Pod = std::is_trivially_copyable_v<T>;

template <Pod T>
std::string pod_bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}
template <Pod T>
std::vector<T> pod_values(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}
}  // namespace detail

inline std::string broadcast_object(const std::string& value, int root, const std::string& name,
                                    int process_set = 0) {
  return broadcast_bytes(value, root, name, process_set);
}
template <detail::Pod T>
T broadcast_object(const T& value, int root, const std::string& name, int process_set = 0) {
  return detail::pod_values<T>(
      broadcast_bytes(detail::pod_bytes(std::vector<T>{value}), root, name, process_set))[0];
}
template <detail::Pod T>
std::vector<T> broadcast_object(const std::vector<T>& value, int root, const std::string& name,
                                int process_set = 0) {
  return detail::pod_values<T>(broadcast_bytes(detail::pod_bytes(value), root, name, process_set));
}
template <detail::Pod T>
std::vector<T> allgather_object(const T& value, const std::string& name, int process_set = 0) {
  std::vector<T> out;
  for (const std::string& bytes :
       allgather_bytes(detail::pod_bytes(std::vector<T>{value}), name, process_set))
    out.push_back(detail::pod_values<T>(bytes)[0]);
  return out;
}
inline std::vector<std::string> allgather_object(const std::string& value, const std::string& name,
                                                 int process_set = 0) {
  return allgather_bytes(value, name, process_set);
}

// Copies root's parameters and buffers into every rank's module (in place,
// without recording autograd history). Modules must have the same structure.
void broadcast_parameters(::torch::nn::Module& module, int root = 0);
void broadcast_parameters(const std::vector<std::pair<std::string, ::torch::Tensor>>& named,
                          int root = 0);

// Makes every rank's optimizer state and hyper-parameters (lr, betas, step
// counts, momentum buffers...) equal to root's, by serialising root's
// optimizer through torch::serialize::OutputArchive (Optimizer::save) and
// loading the bytes elsewhere (Optimizer::load). Works for every optimizer
// implementing save/load: SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS and
// lockstep/optim's. State root has not created yet stays absent everywhere
// (it is created lazily by the first step, identically on every rank since
// the parameters and gradients agree). Horovod instead creates it here with
// a step on zero gradients, which leaves Adam-like step counts one ahead of
// a single-process run; lockstep keeps the first real step the first step.
// Parameters must be in the same order.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root = 0);

// Optimizer::save/load plus every param group's hyper-parameters: LibTorch
// 1.13's load assigns them through the OptimizerOptions base class, so lr,
// betas, momentum... would silently keep their local values. Loading clears
// the local state first (state absent from the archive goes too).
void save_optimizer(const ::torch::optim::Optimizer& optimizer,
                    ::torch::serialize::OutputArchive& archive);
void load_optimizer(::torch::optim::Optimizer& optimizer,
                    ::torch::serialize::InputArchive& archive);

// Archive <-> bytes, used by the above and by checkpoints.
std::string archive_to_bytes(::torch::serialize::OutputArchive& archive);
void archive_from_bytes(::torch::serialize::InputArchive& archive, const std::string& bytes);

}  // namespace lockstep::torch
