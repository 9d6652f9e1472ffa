// The torch-level collectives on one tensor and the engine calls without
// tensors (barrier, join, process sets, the timeline). Every engine call of
// lockstep::torch goes through collectives*.cc and detail::eng()
// (collectives_seam.h): the seam to swap the transport behind it. init()
// and the world queries are in init.cc.
#include "lockstep/torch/collectives.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "torch/collectives_internal.h"
#include "torch/collectives_seam.h"

namespace lockstep::torch {

using detail::check_into_output;
using detail::claim;
using detail::Claimed;
using detail::copy_back;
using detail::eng;
using detail::engine_input;
using detail::holding;
using detail::into_allocator;
using detail::into_finish;
using detail::op_options_for;
using detail::owned_copy;
using detail::refuse_grad_leaf;
using detail::shape_of;
using detail::tensor_allocator;
using detail::to_input_device;

// ---- TensorHandle

TensorHandle::TensorHandle(engine::Handle handle, std::shared_ptr<::torch::Tensor> result,
                           std::vector<::torch::Tensor> keep_alive, std::function<void()> finish)
    : handle_(std::move(handle)),
      result_(std::move(result)),
      keep_alive_(std::move(keep_alive)),
      finish_(std::move(finish)) {}

TensorHandle::TensorHandle(engine::Handle handle,
                           std::vector<std::shared_ptr<::torch::Tensor>> results,
                           std::vector<::torch::Tensor> keep_alive, std::function<void()> finish)
    : handle_(std::move(handle)),
      results_(std::move(results)),
      keep_alive_(std::move(keep_alive)),
      finish_(std::move(finish)) {}

// Note [Dropped handles]
// The engine holds raw pointers into the tensors the handle keeps alive
// (a private copy for the out-of-place forms, staged host buffers) and the
// handle holds the names it claimed (Note [Names pending until waited]). A
// handle dropped before wait() hands all of it to the operation, released
// when the engine completes it, so a program that never waits frees nothing
// under the engine; its name stays taken until then.
TensorHandle::~TensorHandle() {
  if (finished_ || !handle_.valid()) return;
  struct Held {
    std::shared_ptr<::torch::Tensor> result;
    std::vector<std::shared_ptr<::torch::Tensor>> results;
    std::vector<::torch::Tensor> keep_alive;
    std::function<void()> finish;  // holds the names' leases
  };
  handle_.retain_until_done(std::make_shared<Held>(
      Held{std::move(result_), std::move(results_), std::move(keep_alive_), std::move(finish_)}));
}

TensorHandle& TensorHandle::operator=(TensorHandle other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(result_, other.result_);
  std::swap(results_, other.results_);
  std::swap(keep_alive_, other.keep_alive_);
  std::swap(finish_, other.finish_);
  std::swap(finished_, other.finished_);
  return *this;  // `other`, holding what was here, retains it if it was not waited on
}

bool TensorHandle::poll() const { return handle_.poll(); }

void TensorHandle::wait() {
  if (finished_) return;
  handle_.wait();
  if (finish_) finish_();
  finish_ = nullptr;  // releases the names it holds (Note [Names pending until waited])
  finished_ = true;
  keep_alive_.clear();
}

::torch::Tensor TensorHandle::result() {
  wait();
  return result_ ? *result_ : ::torch::Tensor();
}

std::vector<::torch::Tensor> TensorHandle::results() {
  wait();
  if (results_.empty()) return {result_ ? *result_ : ::torch::Tensor()};
  std::vector<::torch::Tensor> out;
  for (const auto& r : results_) out.push_back(*r);
  return out;
}

std::vector<int64_t> TensorHandle::received_splits() {
  wait();
  return handle_.received_splits();
}

// ---- allreduce

TensorHandle allreduce_async_(::torch::Tensor& tensor, std::string name, AllreduceOptions options) {
  refuse_grad_leaf(tensor, "allreduce");
  ::torch::Tensor buffer = engine_input(tensor, "allreduce");
  engine::OpOptions op_options = op_options_for(buffer, options.process_set);
  Claimed n = claim(std::move(name), "allreduce", options.process_set);
  engine::Handle handle =
      eng().allreduce_async(n.name, buffer.data_ptr(), buffer.data_ptr(), shape_of(buffer),
                            to_comm_dtype(buffer.scalar_type()), options.op, options.prescale,
                            options.postscale, op_options);
  return TensorHandle(std::move(handle), std::make_shared<::torch::Tensor>(tensor), {buffer},
                      holding(copy_back(tensor, buffer), {n.lease}));
}

void allreduce_(::torch::Tensor& tensor, std::string name, AllreduceOptions options) {
  allreduce_async_(tensor, std::move(name), options).wait();
}

TensorHandle allreduce_async(const ::torch::Tensor& tensor, std::string name,
                             AllreduceOptions options) {
  ::torch::Tensor copy = owned_copy(tensor, "allreduce");
  return allreduce_async_(copy, std::move(name), options);
}

// ---- allgather

TensorHandle allgather_async(const ::torch::Tensor& tensor, std::string name, int process_set) {
  ::torch::Tensor input = engine_input(tensor, "allgather");
  if (input.dim() == 0) input = input.reshape({1});
  auto out = std::make_shared<::torch::Tensor>();
  engine::OpOptions op_options = op_options_for(input, process_set);
  Claimed n = claim(std::move(name), "allgather", process_set);
  engine::Handle handle = eng().allgather_async(n.name, input.data_ptr(), shape_of(input),
                                                to_comm_dtype(input.scalar_type()),
                                                tensor_allocator(out, input), op_options);
  return TensorHandle(std::move(handle), out, {input},
                      holding(to_input_device(out, tensor), {n.lease}));
}

TensorHandle allgather_into_async(const ::torch::Tensor& tensor, ::torch::Tensor output,
                                  std::string name, int process_set) {
  ::torch::Tensor input = engine_input(tensor, "allgather_into_async");
  check_into_output(input, output, "allgather_into_async");
  if (input.dim() == 0) input = input.reshape({1});
  auto out = std::make_shared<::torch::Tensor>();
  Claimed n = claim(std::move(name), "allgather", process_set);
  engine::Handle handle = eng().allgather_async(
      n.name, input.data_ptr(), shape_of(input), to_comm_dtype(input.scalar_type()),
      into_allocator(out, output, input.device()), op_options_for(input, process_set));
  return TensorHandle(std::move(handle), out, {input, output},
                      holding(into_finish(out, output, "allgather_into_async"), {n.lease}));
}

// ---- broadcast

TensorHandle broadcast_async_(::torch::Tensor& tensor, int root, std::string name,
                              int process_set) {
  refuse_grad_leaf(tensor, "broadcast");
  ::torch::Tensor buffer = engine_input(tensor, "broadcast");
  engine::OpOptions op_options = op_options_for(buffer, process_set);
  Claimed n = claim(std::move(name), "broadcast", process_set);
  engine::Handle handle =
      eng().broadcast_async(n.name, buffer.data_ptr(), shape_of(buffer),
                            to_comm_dtype(buffer.scalar_type()), root, op_options);
  return TensorHandle(std::move(handle), std::make_shared<::torch::Tensor>(tensor), {buffer},
                      holding(copy_back(tensor, buffer), {n.lease}));
}

void broadcast_(::torch::Tensor& tensor, int root, std::string name, int process_set) {
  broadcast_async_(tensor, root, std::move(name), process_set).wait();
}

TensorHandle broadcast_async(const ::torch::Tensor& tensor, int root, std::string name,
                             int process_set) {
  ::torch::Tensor copy = owned_copy(tensor.defined() ? tensor.detach() : tensor, "broadcast");
  return broadcast_async_(copy, root, std::move(name), process_set);
}

namespace detail {

::torch::Tensor broadcast_copy(const ::torch::Tensor& tensor, int root, std::string name,
                               int process_set) {
  ::torch::Tensor copy = owned_copy(tensor, "broadcast");
  broadcast_(copy, root, std::move(name), process_set);
  return copy;
}

SetPlace place_in_set(int process_set, const std::string& name) {
  if (process_set == 0) return {rank(), size()};
  ::torch::Tensor ranks =
      allgather_async(::torch::tensor({static_cast<int64_t>(rank())}), name, process_set).result();
  int64_t index = (ranks == rank()).nonzero().item<int64_t>();
  return {static_cast<int>(index), static_cast<int>(ranks.numel())};
}

}  // namespace detail

// ---- reduce_scatter

TensorHandle reduce_scatter_async(const ::torch::Tensor& tensor, std::string name,
                                  ReduceScatterOptions options) {
  ::torch::Tensor input = engine_input(tensor, "reduce_scatter");
  auto out = std::make_shared<::torch::Tensor>();
  engine::OpOptions op_options = op_options_for(input, options.process_set);
  Claimed n = claim(std::move(name), "reduce_scatter", options.process_set);
  engine::Handle handle = eng().reduce_scatter_async(n.name, input.data_ptr(), shape_of(input),
                                                     to_comm_dtype(input.scalar_type()), options.op,
                                                     tensor_allocator(out, input), op_options);
  return TensorHandle(std::move(handle), out, {input},
                      holding(to_input_device(out, tensor), {n.lease}));
}

TensorHandle reduce_scatter_into_async(const ::torch::Tensor& tensor, ::torch::Tensor output,
                                       std::string name, ReduceScatterOptions options) {
  ::torch::Tensor input = engine_input(tensor, "reduce_scatter_into_async");
  check_into_output(input, output, "reduce_scatter_into_async");
  auto out = std::make_shared<::torch::Tensor>();
  Claimed n = claim(std::move(name), "reduce_scatter", options.process_set);
  engine::Handle handle = eng().reduce_scatter_async(
      n.name, input.data_ptr(), shape_of(input), to_comm_dtype(input.scalar_type()), options.op,
      into_allocator(out, output, input.device()), op_options_for(input, options.process_set));
  return TensorHandle(std::move(handle), out, {input, output},
                      holding(into_finish(out, output, "reduce_scatter_into_async"), {n.lease}));
}

// ---- alltoall

TensorHandle alltoall_async(const ::torch::Tensor& tensor, std::vector<int64_t> splits,
                            std::string name, int process_set) {
  ::torch::Tensor input = engine_input(tensor, "alltoall");
  auto out = std::make_shared<::torch::Tensor>();
  engine::OpOptions op_options = op_options_for(input, process_set);
  Claimed n = claim(std::move(name), "alltoall", process_set);
  engine::Handle handle = eng().alltoall_async(
      n.name, input.data_ptr(), shape_of(input), to_comm_dtype(input.scalar_type()),
      std::move(splits), tensor_allocator(out, input), op_options);
  return TensorHandle(std::move(handle), out, {input},
                      holding(to_input_device(out, tensor), {n.lease}));
}

void barrier() {
  if (engine::is_initialized()) eng().barrier();
}

int join() { return engine::is_initialized() ? eng().join() : 0; }
int add_process_set(std::vector<int> ranks) { return eng().add_process_set(std::move(ranks)); }
void remove_process_set(int id) { eng().remove_process_set(id); }
void start_timeline(const std::string& path, bool mark_cycles) {
  eng().start_timeline(path, mark_cycles);
}
void stop_timeline() { eng().stop_timeline(); }

}  // namespace lockstep::torch
