// Vocabulary of the engine API: collectives, shapes, options.
//
// The engine is framework-agnostic: tensors are raw caller-owned buffers plus
// a shape and a comm::DataType. Buffers must stay valid (and inputs
// unmodified) until the operation's Handle completes.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/comm/device.h"
#include "lockstep/comm/types.h"

namespace lockstep::engine {

using comm::DataType;
using comm::ReduceOp;

enum class Collective : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReduceScatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
};
// The one spelling every layer uses: "allreduce", "reduce_scatter", ...
std::string_view collective_name(Collective c);

// Dimensions, outermost first. A scalar has an empty shape.
using Shape = std::vector<int64_t>;
int64_t num_elements(const Shape& shape);
std::string format_shape(const Shape& shape);  // "[10,128]"

// Returns a buffer of num_elements(shape) * dtype_size(dtype) bytes that stays
// valid until the handle completes. Called on the engine's background thread
// once the output shape is known (allgather, alltoall, reduce_scatter), so the
// torch layer can hand out the storage of a freshly allocated tensor.
using Allocator = std::function<void*(const Shape& shape, DataType dtype)>;

// Called once, on a background thread, when the operation finishes and
// before its waiters wake: with nullptr on success, else the error wait()
// would throw. It may submit new operations but must not wait on one, nor
// call shutdown() (it runs on the thread those would wait for).
using Callback = std::function<void(std::exception_ptr error)>;

struct OpOptions {
  int process_set = 0;  // 0: all ranks; else an id from add_process_set / init
  Callback on_done;
  // Where the buffers live. kCuda: device pointers on this rank's GPU, moved
  // by the device communicator (Engine::set_device_communicator); every rank
  // must say the same for a name (negotiated, a MismatchError otherwise).
  comm::MemoryKind memory = comm::MemoryKind::kHost;
  // kCuda only, optional: a cudaEvent_t recorded on the stream that produced
  // the input; the device communicator's stream waits for it before reading
  // (no host synchronisation). Kept alive until the operation completes.
  std::shared_ptr<void> ready_event;
};

}  // namespace lockstep::engine
