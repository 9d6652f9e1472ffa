// Executor: runs one planned Batch on a process set's Communicator, filling
// this rank's outputs. A rank without an entry for an item (it has joined)
// still takes part: neutral values for an allreduce, a scratch buffer for
// a broadcast (the only data-carrying collectives that run with joined ranks).
//
// Batches of CUDA buffers (Request::memory == kCuda) run on the device
// communicator instead (executor_device.cc, Note [Device batches]).
//
// Thread-safety: none; used by one ProcessSetWorker's thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/fusion.h"
#include "engine/negotiator.h"
#include "engine/op_state.h"
#include "engine/timeline.h"

namespace lockstep::engine::detail {

// Elements per first-dimension row (1 for a scalar), and `shape` with `rows`
// rows: the per-rank blocks of allgather, alltoall and reduce_scatter.
size_t row_elements(const Shape& shape);
Shape with_rows(const Shape& shape, int64_t rows);

// Where a collective's body runs (Note [One body per collective] in
// executor.cc): the host communicator with this executor's scratch and
// memcpy, or the device communicator with device scratch that lives until
// the batch's wait and copies on its stream.
struct Target {
  comm::Communicator& comm;
  bool device = false;  // reductions: the transport applies the op (no host pass)
  // The entry's allocation for `shape`, or scratch (and `error` set) when
  // there is no entry or its allocator fails: the peers still expect us.
  std::function<void*(Entry*, const Shape&, DataType, std::exception_ptr&)> allocate;
  std::function<void*(size_t bytes)> scratch;
  std::function<void(void* dst, const void* src, size_t bytes)> copy;
};

class Executor {
 public:
  // `device`: where the engine keeps its device communicator (may hold null).
  Executor(comm::Communicator& comm, Timeline* timeline,
           const std::atomic<comm::Communicator*>* device = nullptr);
  ~Executor() = default;
  // Frees the device fusion buffer; call while the device communicator lives.
  void release_device() noexcept;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // entries[i]: this rank's entry for cycle.ready[i], or null. A failure
  // local to one entry (its allocator threw) lands in errors[i]; errors of
  // the collective itself propagate. Returns the bytes moved.
  size_t run(const Batch& batch, const CycleResult& cycle, std::span<Entry* const> entries,
             std::span<std::exception_ptr> errors);

 private:
  // A batch's phases for the timeline. data_ready: when the batch's inputs
  // were ready for the collective (start on the host; on a device batch the
  // GPU's start, after the producers' events). gpu_times: the phases are the
  // GPU's (device_times()), not the host's enqueue times.
  struct Times {
    Clock::time_point start, data_ready, copied_in, reduced, copied_out;
    bool gpu_times = false;
  };
  // The one dispatch of both paths: the collective's body on `target`.
  // Throws lockstep::Error for a collective without a body.
  size_t run_body(const Target& target, const Batch& batch, const CycleResult& cycle,
                  std::span<Entry* const> entries, std::span<std::exception_ptr> errors, Times& t);
  Target host_target();
  size_t allreduce(const Batch& batch, const CycleResult& cycle, std::span<Entry* const> entries,
                   Times& t);
  size_t allgather(const Target& target, const ReadyItem& item, const CycleResult& cycle,
                   Entry* entry, std::exception_ptr& error);
  size_t broadcast(const Target& target, const ReadyItem& item, Entry* entry);
  size_t alltoall(const Target& target, const ReadyItem& item, Entry* entry,
                  std::exception_ptr& error);
  size_t reduce_scatter(const Target& target, const ReadyItem& item, Entry* entry,
                        std::exception_ptr& error);
  // The caller's allocation, or scratch (and `error` set) when it throws.
  void* allocate(Entry* entry, const Shape& shape, DataType dtype, std::exception_ptr& error);
  void* scratch(size_t bytes);
  void record(const Batch& batch, std::span<Entry* const> entries, const Times& t);
  // The algorithm an allreduce batch ran, as the transport names it
  // (Backend::allreduce_algorithm: shm's own decision), or "".
  std::string algorithm_of(const Batch& batch, const Request& request) const;

  // executor_device.cc
  size_t run_on_device(const Batch& batch, const CycleResult& cycle,
                       std::span<Entry* const> entries, std::span<std::exception_ptr> errors,
                       Times& t);
  size_t device_allreduce(comm::Communicator& dev, const Batch& batch, const CycleResult& cycle,
                          std::span<Entry* const> entries, Times& t);
  Target device_target(comm::Communicator& dev);
  void* device_buffer(comm::Communicator& dev, size_t bytes);  // the device fusion buffer
  // Marks a phase boundary on the device stream while the timeline records.
  void device_mark(comm::DeviceMemory& mem) const;
  // After the batch's wait: its phases from the device's marks, if it kept any.
  void device_times(comm::DeviceMemory& mem, Times& t) const;
  // The entry's allocation, or device scratch (and `error` set) when it fails.
  void* device_allocate(comm::Communicator& dev, Entry* entry, const Shape& shape, DataType dtype,
                        std::exception_ptr& error);

  comm::Communicator& comm_;
  Timeline* timeline_;
  const std::atomic<comm::Communicator*>* device_;
  comm::Communicator* device_owner_ = nullptr;  // the communicator device_fusion_ came from
  void* device_fusion_ = nullptr;
  size_t device_fusion_bytes_ = 0;
  std::vector<std::shared_ptr<void>> device_temps_;  // scratch until the batch's wait
  std::vector<std::byte> fusion_;
  std::vector<int64_t> wide_;  // integer averages with joined ranks (scaling.h)
  std::vector<std::byte> scratch_;
};

}  // namespace lockstep::engine::detail
