// The seam between lockstep::torch and the engine (collectives_seam.h):
// names, staging, allocators and the checks every collective shares.
#include "torch/collectives_seam.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/base/mutex.h"
#include "lockstep/base/terminate.h"
#include "lockstep/torch/collectives.h"
#include "torch/device.h"

namespace lockstep::torch {
namespace detail {
namespace {

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
// submission until its handle is waited on, which every rank decides alike,
// so a repeat is refused deterministically by name and rank. A handle
// dropped unwaited keeps it until its operation finishes (Note [Dropped
// handles] in collectives.cc).
Mutex lease_mutex;
std::set<std::pair<int, std::string>> leased_names LOCKSTEP_GUARDED_BY(lease_mutex);

}  // namespace

// Frees its name on destruction. Not copyable: a copy's destructor would free
// the name early.
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

engine::Engine& eng() {
  if (!engine::is_initialized()) {
    install_terminate_handler();  // uncaught: a named error, not a bare SIGABRT
    throw InvalidArgument("lockstep::torch: call lockstep::torch::init() before collectives");
  }
  return engine::global();
}

Claimed claim(std::string name, const char* op, int process_set) {
  Claimed c{auto_name(std::move(name), op), nullptr};
  MutexLock lock(lease_mutex);
  if (!leased_names.emplace(process_set, c.name).second)
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}: a collective named '{}' is already pending on rank {} (process set "
        "{}: its handle was not waited on yet); wait() for it before submitting the name again, "
        "or give each operation its own name",
        op, c.name, torch::rank(), process_set));
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

// One finish step running each of a group's (the empty ones skipped).
std::function<void()> run_each(std::vector<std::function<void()>> steps) {
  std::erase_if(steps, [](const std::function<void()>& f) { return !f; });
  if (steps.empty()) return {};
  return [steps = std::move(steps)] {
    for (const auto& step : steps) step();
  };
}

ClaimedGroup claim_group(std::vector<std::string> names, const char* op, int process_set) {
  ClaimedGroup g;
  for (std::string& name : names) {
    Claimed c = claim(std::move(name), op, process_set);
    g.names.push_back(std::move(c.name));
    g.leases.push_back(std::move(c.lease));
  }
  return g;
}

void check_group_lists(size_t tensors, size_t names, const char* op) {
  if (tensors != names)
    throw InvalidArgument(
        fmt::format("lockstep::torch::{}: {} tensors but {} names; give one "
                    "name per tensor",
                    op, tensors, names));
  if (tensors == 0) throw InvalidArgument(fmt::format("lockstep::torch::{}: no tensors", op));
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
        "lockstep::torch::sparse_allreduce",
        op, t.is_sparse() ? "sparse" : "non-strided (sparse CSR, mkldnn)"));
  to_comm_dtype(t.scalar_type());
  if (on_device_path(t)) return t.contiguous();
  if (t.is_cuda()) {
    ::torch::Tensor host =
        ::torch::empty(t.sizes(), t.options().device(::torch::kCPU).pinned_memory(true));
    host.copy_(t);
    return host;
  }
  if (!t.device().is_cpu())
    throw InvalidArgument(
        fmt::format("lockstep::torch::{}: tensor is on {}; only CPU and CUDA tensors are supported",
                    op, t.device().str()));
  return t.contiguous();
}

// A group goes to the engine with one ready event (one device) and, for a
// grouped allreduce, one dtype: InvalidArgument names the first member that
// differs.
void check_one_group(const std::vector<::torch::Tensor>& buffers,
                     const std::vector<::torch::Tensor>& tensors,
                     const std::vector<std::string>& names, const char* op, bool one_dtype) {
  for (size_t i = 1; i < buffers.size(); ++i) {
    if (one_dtype && buffers[i].scalar_type() != buffers[0].scalar_type())
      throw InvalidArgument(fmt::format(
          "lockstep::torch::{}: '{}' is {} but '{}' is {}; a group has one dtype (cast them, or "
          "submit them as separate groups)",
          op, names[i], c10::toString(buffers[i].scalar_type()), names[0],
          c10::toString(buffers[0].scalar_type())));
    if (buffers[i].device() != buffers[0].device())
      throw InvalidArgument(fmt::format(
          "lockstep::torch::{}: '{}' is on {} but '{}' is on {}; a group lives on one device", op,
          names[i], tensors[i].device().str(), names[0], tensors[0].device().str()));
  }
}

// PyTorch refuses in-place operations on a leaf that requires grad; so do
// the in-place collectives, which write its memory behind autograd's back.
void refuse_grad_leaf(const ::torch::Tensor& t, const char* op) {
  if (::torch::GradMode::is_enabled() && t.defined() && t.requires_grad() && t.is_leaf())
    throw InvalidArgument(fmt::format(
        "lockstep::torch::{}_: the tensor is a leaf that requires grad, which an in-place "
        "collective cannot change (as PyTorch refuses in-place ops on it); call the out-of-place "
        "lockstep::torch::{} (differentiable), or wrap the call in torch::NoGradGuard",
        op, op));
}

// Outputs the engine allocates live where the engine's input does.
engine::Allocator tensor_allocator(std::shared_ptr<::torch::Tensor> out,
                                   const ::torch::Tensor& input) {
  return
      [out, options = ::torch::TensorOptions().dtype(input.scalar_type()).device(input.device())](
          const engine::Shape& shape, engine::DataType) -> void* {
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
  if (!output.defined() || !output.is_contiguous() || output.scalar_type() != input.scalar_type())
    throw InvalidArgument(
        fmt::format("lockstep::torch::{}: output must be a contiguous {} tensor (got {})", op,
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
      throw InvalidArgument(fmt::format(
          "lockstep::torch::{}: the result has shape {} but output "
          "has {}",
          op, engine::format_shape(shape_of(*out)), engine::format_shape(shape_of(output))));
    ::torch::NoGradGuard no_grad;
    output.copy_(*out);
  };
}

}  // namespace detail

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
          "i8, u8, i16, i32 or i64)",
          c10::toString(type)));
  }
}

}  // namespace lockstep::torch
