// The one file that talks to the engine: every torch-level collective goes
// through here (the seam to swap the transport behind lockstep::torch).
// init() and the world queries are in init.cc.
#include "lockstep/torch/collectives.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/base/mutex.h"
#include "lockstep/base/terminate.h"
#include "lockstep/engine/engine.h"
#include "torch/collectives_internal.h"
#include "torch/device.h"

namespace lockstep::torch {
namespace {

engine::Engine& eng() {
  if (!engine::is_initialized()) {
    install_terminate_handler();  // uncaught: a named error, not a bare SIGABRT
    throw InvalidArgument("lockstep::torch: call lockstep::torch::init() before collectives");
  }
  return engine::global();
}

// Per-op counters behind the generated names ("allreduce.0", ...): every
// rank numbers its unnamed calls alike, in program order.
Mutex auto_name_mutex;
std::map<std::string, uint64_t> auto_name_counters LOCKSTEP_GUARDED_BY(auto_name_mutex);

std::string auto_name(std::string name, const char* op) {
  if (!name.empty()) return name;
  MutexLock lock(auto_name_mutex);
  return fmt::format("{}.{}", op, auto_name_counters[op]++);
}

// Note [Names pending until waited]
// The engine frees a name when its operation completes, which on a fast
// transport may or may not have happened when the caller submits the name
// again: ranks would then accept different numbers of submissions and the
// job end in a misleading shutdown error. Here a name stays taken from
// submission until its handle is waited on (or destroyed), which every rank
// decides alike, so a repeat is refused deterministically by name and rank.
Mutex lease_mutex;
std::set<std::pair<int, std::string>> leased_names LOCKSTEP_GUARDED_BY(lease_mutex);

// Not copyable: a copy's destructor would free the name early.
struct NameLease {
  std::pair<int, std::string> key;
  NameLease(int set, std::string name) : key(set, std::move(name)) {}
  NameLease(const NameLease&) = delete;
  NameLease& operator=(const NameLease&) = delete;
  ~NameLease() {
    MutexLock lock(lease_mutex);
    leased_names.erase(key);
  }
};

struct Claimed {
  std::string name;
  std::shared_ptr<NameLease> lease;
};

Claimed claim(std::string name, const char* op, int process_set) {
  Claimed c{auto_name(std::move(name), op), nullptr};
  MutexLock lock(lease_mutex);
  if (!leased_names.emplace(process_set, c.name).second)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: a collective named '{}' is already pending on rank {} (process set "
        "{}: its handle was not waited on yet); wait() for it before submitting the name again, "
        "or give each operation its own name", op, c.name, rank(), process_set));
  c.lease = std::make_shared<NameLease>(process_set, c.name);
  return c;
}

// The handle's finish step, holding the names until it ran.
std::function<void()> holding(std::function<void()> finish,
                              std::vector<std::shared_ptr<NameLease>> leases) {
  return [finish = std::move(finish), leases = std::move(leases)] {
    if (finish) finish();
  };
}

engine::Shape shape_of(const ::torch::Tensor& t) {
  return engine::Shape(t.sizes().begin(), t.sizes().end());
}

// Note [CUDA tensors over a host transport]
// The engine reads and writes host memory. A CUDA tensor is staged: copied
// into pinned host memory (a blocking copy, so the producer's stream is done
// with it), reduced there, and copied back with a non-blocking copy queued
// on the caller's current stream, which orders every later kernel of that
// stream after it (LibTorch's pinned allocator keeps the buffer until the
// copy ran). Results the engine allocates (allgather, alltoall,
// reduce_scatter) come back to the input's device with a blocking copy when
// the handle is waited on. This is what lets workers that share a host (or one GPU)
// use shm, and it is the only CUDA path of the MPI and Gloo transports.

// Note [Which way a CUDA tensor travels]
// init() decides once (choose_device_backend, LOCKSTEP_DEVICE_BACKEND):
// with NCCL built, a GPU per worker and a fixed world, the engine gets a
// device communicator and CUDA tensors stay on the GPU: the engine reads
// them after an event recorded on the caller's current stream (no host
// synchronisation) and completes their handles once the results are there
// (Note [Device batches] in src/engine/executor_device.cc). Otherwise they
// are staged through host memory (Note [CUDA tensors over a host
// transport]).
bool on_device_path(const ::torch::Tensor& t) {
  return t.is_cuda() && eng().has_device_communicator();
}

// Options for the engine: the process set and, for a tensor on the device
// path, where it lives and the event that says it is ready.
engine::OpOptions op_options_for(const ::torch::Tensor& input, int process_set) {
  engine::OpOptions o;
  o.process_set = process_set;
  if (on_device_path(input)) {
    o.memory = comm::MemoryKind::kCuda;
    o.ready_event = detail::record_on_current_stream(input.get_device());
  }
  return o;
}

// The tensor the engine reads: host memory, contiguous (a copy when needed),
// or the contiguous CUDA tensor itself on the device path.
::torch::Tensor engine_input(const ::torch::Tensor& t, const char* op) {
  if (!t.defined()) throw InvalidArgument(fmt::format("lockstep::torch::{}: undefined tensor", op));
  if (t.layout() != ::torch::kStrided)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: {} tensors are not supported by collectives (they need a strided "
        "layout); pass tensor.to_dense(), or reduce a sparse COO tensor with "
        "lockstep::torch::sparse_allreduce", op, t.is_sparse() ? "sparse" : "non-strided (sparse CSR, mkldnn)"));
  to_comm_dtype(t.scalar_type());
  if (on_device_path(t)) return t.contiguous();
  if (t.is_cuda()) {
    ::torch::Tensor host = ::torch::empty(
        t.sizes(), t.options().device(::torch::kCPU).pinned_memory(true));
    host.copy_(t);
    return host;
  }
  if (!t.device().is_cpu())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: tensor is on {}; only CPU and CUDA tensors are supported", op,
        t.device().str()));
  return t.contiguous();
}

// PyTorch refuses in-place operations on a leaf that requires grad; so do
// the in-place collectives, which write its memory behind autograd's back.
void refuse_grad_leaf(const ::torch::Tensor& t, const char* op) {
  if (::torch::GradMode::is_enabled() && t.defined() && t.requires_grad() && t.is_leaf())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}_: the tensor is a leaf that requires grad, which an in-place "
        "collective cannot change (as PyTorch refuses in-place ops on it); call the out-of-place "
        "lockstep::torch::{} (differentiable), or wrap the call in torch::NoGradGuard", op, op));
}

// Outputs the engine allocates live where the engine's input does.
engine::Allocator tensor_allocator(std::shared_ptr<::torch::Tensor> out,
                                   const ::torch::Tensor& input) {
  return [out, options = ::torch::TensorOptions().dtype(input.scalar_type()).device(
                   input.device())](const engine::Shape& shape, engine::DataType) -> void* {
    *out = ::torch::empty(shape, options);
    return out->data_ptr();
  };
}

// In-place operations on a tensor the engine cannot write directly copy back.
std::function<void()> copy_back(::torch::Tensor target, ::torch::Tensor buffer) {
  if (target.data_ptr() == buffer.data_ptr()) return {};
  return [target, buffer]() mutable {
    ::torch::NoGradGuard no_grad;
    target.copy_(buffer, /*non_blocking=*/target.is_cuda() && buffer.is_pinned());
  };
}

// A private copy for the out-of-place collectives, on the tensor's device.
::torch::Tensor owned_copy(const ::torch::Tensor& t, const char* op) {
  if (t.defined() && t.is_cuda()) return t.clone(at::MemoryFormat::Contiguous);
  return engine_input(t, op).clone();
}

// A result the engine allocated in host memory goes to the input's device.
std::function<void()> to_input_device(std::shared_ptr<::torch::Tensor> out,
                                      const ::torch::Tensor& input) {
  if (!input.is_cuda()) return {};
  return [out, device = input.device()] {
    if (out->defined()) *out = out->to(device, /*non_blocking=*/false);
  };
}

// The _into variants: the engine writes the caller's `output` when it is where
// the engine writes (the input's device) and has the result's shape;
// otherwise into a fresh tensor, copied over (other device) or refused
// (other shape) when the caller waits.
void check_into_output(const ::torch::Tensor& input, const ::torch::Tensor& output,
                       const char* op) {
  if (!output.defined() || !output.is_contiguous() ||
      output.scalar_type() != input.scalar_type())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: output must be a contiguous {} tensor (got {})", op,
        c10::toString(input.scalar_type()),
        output.defined() ? c10::toString(output.scalar_type()) : "undefined"));
}

engine::Allocator into_allocator(std::shared_ptr<::torch::Tensor> out, ::torch::Tensor output,
                                 ::torch::Device engine_device) {
  return [out, output, engine_device](const engine::Shape& shape, engine::DataType) -> void* {
    const bool fits = output.device() == engine_device &&
                      engine::Shape(output.sizes().begin(), output.sizes().end()) == shape;
    *out = fits ? output : ::torch::empty(shape, output.options().device(engine_device));
    return out->data_ptr();
  };
}

std::function<void()> into_finish(std::shared_ptr<::torch::Tensor> out, ::torch::Tensor output,
                                  const char* op) {
  return [out, output, op]() mutable {
    if (out->is_same(output)) return;
    if (!out->sizes().equals(output.sizes()))
      throw InvalidArgument(fmt::format("lockstep::torch::{}: the result has shape {} but output "
                                        "has {}", op, engine::format_shape(shape_of(*out)),
                                        engine::format_shape(shape_of(output))));
    ::torch::NoGradGuard no_grad;
    output.copy_(*out);
  };
}

}  // namespace

comm::DataType to_comm_dtype(::torch::ScalarType type) {
  switch (type) {
    case ::torch::kFloat16: return comm::DataType::kFloat16;
    case ::torch::kBFloat16: return comm::DataType::kBFloat16;
    case ::torch::kFloat32: return comm::DataType::kFloat32;
    case ::torch::kFloat64: return comm::DataType::kFloat64;
    case ::torch::kInt8: return comm::DataType::kInt8;
    case ::torch::kUInt8: return comm::DataType::kUInt8;
    case ::torch::kInt32: return comm::DataType::kInt32;
    case ::torch::kInt64: return comm::DataType::kInt64;
    case ::torch::kInt16: return comm::DataType::kInt16;
    case ::torch::kBool:
      throw InvalidArgument(
          "lockstep::torch: dtype Bool is not supported by collectives (a sum of booleans has no "
          "bool result); cast to uint8 or int32 first, e.g. tensor.to(torch::kUInt8)");
    default:
      throw InvalidArgument(fmt::format(
          "lockstep::torch: dtype {} is not supported by collectives (use f16, bf16, f32, f64, "
          "i8, u8, i16, i32 or i64)", c10::toString(type)));
  }
}

// ---- TensorHandle

TensorHandle::TensorHandle(engine::Handle handle, std::shared_ptr<::torch::Tensor> result,
                           std::vector<::torch::Tensor> keep_alive, std::function<void()> finish)
    : handle_(std::move(handle)),
      result_(std::move(result)),
      keep_alive_(std::move(keep_alive)),
      finish_(std::move(finish)) {}

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
  engine::Handle handle = eng().allreduce_async(
      n.name, buffer.data_ptr(), buffer.data_ptr(),
      shape_of(buffer), to_comm_dtype(buffer.scalar_type()), options.op, options.prescale,
      options.postscale, op_options);
  return TensorHandle(std::move(handle), std::make_shared<::torch::Tensor>(tensor), {buffer},
                      holding(copy_back(tensor, buffer), {n.lease}));
}

TensorHandle grouped_allreduce_async_(std::vector<::torch::Tensor>& tensors,
                                      std::vector<std::string> names, AllreduceOptions options) {
  if (tensors.size() != names.size())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::grouped_allreduce_async_: {} tensors but {} names", tensors.size(),
        names.size()));
  if (tensors.empty())
    throw InvalidArgument("lockstep::torch::grouped_allreduce_async_: no tensors");
  std::vector<::torch::Tensor> buffers;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<engine::Shape> shapes;
  std::vector<std::function<void()>> copies;
  for (auto& tensor : tensors) {
    refuse_grad_leaf(tensor, "grouped_allreduce");
    buffers.push_back(engine_input(tensor, "grouped_allreduce"));
    if (buffers.back().scalar_type() != buffers.front().scalar_type())
      throw InvalidArgument(fmt::format(
          "lockstep::torch::grouped_allreduce_async_: '{}' is {} but '{}' is {}; a group has one "
          "dtype", names[buffers.size() - 1], c10::toString(buffers.back().scalar_type()),
          names.front(), c10::toString(buffers.front().scalar_type())));
    if (buffers.back().device() != buffers.front().device())
      throw InvalidArgument(fmt::format(
          "lockstep::torch::grouped_allreduce_async_: '{}' is on {} but '{}' is on {}; a group "
          "lives on one device", names[buffers.size() - 1], tensors[buffers.size() - 1].device().str(),
          names.front(), tensors.front().device().str()));
    inputs.push_back(buffers.back().data_ptr());
    outputs.push_back(buffers.back().data_ptr());
    shapes.push_back(shape_of(buffers.back()));
    if (auto copy = copy_back(tensor, buffers.back())) copies.push_back(std::move(copy));
  }
  engine::OpOptions op_options = op_options_for(buffers.front(), options.process_set);
  std::vector<std::shared_ptr<NameLease>> leases;
  for (const std::string& name : names)
    leases.push_back(claim(name, "grouped_allreduce", options.process_set).lease);
  engine::Handle handle = eng().grouped_allreduce_async(
      names, inputs, outputs, shapes, to_comm_dtype(buffers.front().scalar_type()), options.op,
      options.prescale, options.postscale, op_options);
  std::function<void()> finish;
  if (!copies.empty())
    finish = [copies = std::move(copies)] {
      for (const auto& copy : copies) copy();
    };
  return TensorHandle(std::move(handle), nullptr, std::move(buffers),
                      holding(std::move(finish), std::move(leases)));
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
  engine::Handle handle = eng().allgather_async(
      n.name, input.data_ptr(), shape_of(input),
      to_comm_dtype(input.scalar_type()), tensor_allocator(out, input), op_options);
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
      n.name, input.data_ptr(), shape_of(input),
      to_comm_dtype(input.scalar_type()), into_allocator(out, output, input.device()),
      op_options_for(input, process_set));
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
  engine::Handle handle = eng().broadcast_async(n.name, buffer.data_ptr(), shape_of(buffer),
                                                to_comm_dtype(buffer.scalar_type()), root,
                                                op_options);
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
  ::torch::Tensor ranks = allgather_async(::torch::tensor({static_cast<int64_t>(rank())}), name,
                                          process_set).result();
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
  engine::Handle handle = eng().reduce_scatter_async(
      n.name, input.data_ptr(), shape_of(input),
      to_comm_dtype(input.scalar_type()), options.op, tensor_allocator(out, input),
      op_options);
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
      n.name, input.data_ptr(), shape_of(input),
      to_comm_dtype(input.scalar_type()), options.op, into_allocator(out, output, input.device()),
      op_options_for(input, options.process_set));
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
      n.name, input.data_ptr(), shape_of(input),
      to_comm_dtype(input.scalar_type()), std::move(splits),
      tensor_allocator(out, input), op_options);
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
