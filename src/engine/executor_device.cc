// Note [Device batches]
// A batch whose buffers live on the GPU (Request::memory == kCuda, the same
// on every rank: negotiated) runs on the device communicator (NCCL) rather
// than the set's host communicator, which still carries the negotiation:
//  1. the communicator's stream waits for each input's ready event (recorded
//     by the producer on its stream; no host synchronisation);
//  2. fused allreduces are packed into a device fusion buffer with copies on
//     that stream, reduced in place, and unpacked the same way;
//  3. the collectives run in deferred mode (DeviceMemory::set_deferred), so
//     the stream holds the whole batch and the host waits once, here, on the
//     engine's thread: a Handle completes when its results are on the GPU.
// Scale factors are folded into one multiplier (postscale * prescale, the
// average's 1/n included) applied by the reduction itself
// (DeviceMemory::allreduce_scaled); unscaled batches use the transport's own
// op, average included; min/max/product take no factors on the device
// (refused at submission). Ranks that have joined contribute nothing the device path could
// fill: such batches fail with InvalidArgument on every rank alike.
// While the timeline records, the stream also carries timing marks at the
// phase boundaries (GPU start after the ready events, fusion copies done,
// collective done, end); after the wait the batch's phases are the GPU's
// durations, ending at the host's wake-up, so the timeline shows the step
// anatomy as the device ran it rather than when the host enqueued it.
#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "engine/executor.h"
#include "engine/scaling.h"
#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/device.h"

namespace lockstep::engine::detail {
namespace {

comm::DeviceMemory& memory_of(comm::Communicator& dev) {
  comm::DeviceMemory* mem = dev.backend().device_memory();
  LOCKSTEP_DCHECK(mem != nullptr, "set_device_communicator took a host backend");
  return *mem;
}

}  // namespace

void* Executor::device_allocate(comm::Communicator& dev, Entry* entry, const Shape& shape,
                                DataType dtype, std::exception_ptr& error) {
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * comm::dtype_size(dtype);
  try {
    void* p = entry->allocate(shape, dtype);  // a CUDA tensor's storage
    if (p || bytes == 0) return p;
    throw InvalidArgument(fmt::format("{} '{}': the allocator returned null for shape {}",
                                      collective_name(entry->request.collective),
                                      entry->request.name, format_shape(shape)));
  } catch (...) {
    error = std::current_exception();
  }
  // The collective must still run (the peers expect us): into scratch that
  // lives until the batch's wait.
  comm::DeviceMemory& mem = memory_of(dev);
  void* p = mem.allocate(bytes + 1);
  device_temps_.emplace_back(p, [&mem](void* q) { mem.free(q); });
  return p;
}

Target Executor::device_target(comm::Communicator& dev) {
  comm::DeviceMemory& mem = memory_of(dev);
  return {
      .comm = dev,
      .device = true,
      .allocate =
          [this, &dev](Entry* e, const Shape& shape, DataType dtype, std::exception_ptr& error) {
            return device_allocate(dev, e, shape, dtype, error);
          },
      .scratch = [this, &dev](size_t bytes) { return device_buffer(dev, bytes); },
      .copy = [&mem](void* dst, const void* src, size_t bytes) { mem.copy(dst, src, bytes); }};
}

void Executor::release_device() noexcept {
  if (!device_fusion_ || !device_owner_) return;
  try {
    memory_of(*device_owner_).free(device_fusion_);
  } catch (...) {  // a broken device: nothing left to free it on
  }
  device_fusion_ = nullptr;
  device_fusion_bytes_ = 0;
}

void* Executor::device_buffer(comm::Communicator& dev, size_t bytes) {
  if (bytes <= device_fusion_bytes_ && device_owner_ == &dev) return device_fusion_;
  comm::DeviceMemory& mem = memory_of(dev);
  if (device_fusion_) memory_of(*device_owner_).free(device_fusion_);
  device_fusion_ = nullptr;
  device_fusion_bytes_ = 0;
  device_fusion_ = mem.allocate(bytes);
  device_fusion_bytes_ = bytes;
  device_owner_ = &dev;
  return device_fusion_;
}

size_t Executor::run_on_device(const Batch& batch, const CycleResult& cycle,
                               std::span<Entry* const> entries,
                               std::span<std::exception_ptr> errors, Times& t) {
  comm::Communicator* dev = device_ ? device_->load() : nullptr;
  const ReadyItem& first = cycle.ready[batch.items.front()];
  if (!dev || cycle.num_joined > 0) {
    // Every rank sees the same: fail these entries alike and move nothing.
    auto error = std::make_exception_ptr(InvalidArgument(fmt::format(
        "{} '{}': CUDA buffers {}", collective_name(first.request.collective), first.request.name,
        dev ? "cannot run while ranks have joined (join() needs host tensors)"
            : "need a device communicator (Engine::set_device_communicator)")));
    for (size_t i : batch.items)
      if (entries[i]) errors[i] = error;
    t.copied_in = t.reduced = t.copied_out = Clock::now();
    return 0;
  }
  comm::DeviceMemory& mem = memory_of(*dev);
  mem.set_deferred(true);
  for (size_t i : batch.items)
    if (Entry* e = entries[i]; e && e->ready_event) mem.wait_event(e->ready_event.get());
  device_mark(mem);  // the GPU reaches the batch: its inputs are ready
  const bool packs = first.request.collective == Collective::kAllreduce;
  if (!packs) device_mark(mem);  // no fusion copies: the collective starts at once
  const size_t bytes = run_body(device_target(*dev), batch, cycle, entries, errors, t);
  if (!packs) {
    t.copied_in = t.start;
    device_mark(mem);  // the collective done; nothing to unpack
  }
  device_mark(mem);   // the end (an allreduce's unpacking copies done)
  mem.synchronize();  // the one host wait of the batch (Note [Device batches])
  device_temps_.clear();
  t.reduced = t.copied_out = Clock::now();
  device_times(mem, t);
  return bytes;
}

void Executor::device_mark(comm::DeviceMemory& mem) const {
  if (timeline_ && timeline_->active()) mem.mark();
}

// Marks: GPU start, fusion copies in, collective done, end (4, in seconds
// after the first). The GPU's end is taken as the host's wake-up.
void Executor::device_times(comm::DeviceMemory& mem, Times& t) const {
  if (!timeline_ || !timeline_->active()) return;
  const std::vector<double> marks = mem.take_marks();
  if (marks.size() != 4) return;  // a backend that cannot time: host times
  auto before_end = [&](double seconds) {
    auto d = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(marks[3] - seconds));
    return std::max(t.start, t.copied_out - d);
  };
  t.data_ready = before_end(marks[0]);
  t.copied_in = before_end(marks[1]);
  t.reduced = before_end(marks[2]);
  t.gpu_times = true;
}

size_t Executor::device_allreduce(comm::Communicator& dev, const Batch& batch,
                                  const CycleResult& cycle, std::span<Entry* const> entries,
                                  Times& t) {
  const Request& req = cycle.ready[batch.items.front()].request;
  comm::DeviceMemory& mem = memory_of(dev);
  const size_t esize = comm::dtype_size(req.dtype);
  const size_t total = batch.bytes / esize;
  // Unscaled: the transport's own op (NCCL averages itself). Scaled (sum or
  // average only, checked at submission): one multiplier inside the sum.
  double factor = req.prescale * req.postscale;
  if (req.op == ReduceOp::kAverage) factor /= dev.size();
  const bool scaled = req.prescale != 1.0 || req.postscale != 1.0;
  auto reduce = [&](const void* in, void* out) {
    if (scaled)
      mem.allreduce_scaled(in, out, total, req.dtype, factor);
    else
      dev.allreduce(in, out, total, req.dtype, req.op);
  };
  if (!batch.fused()) {
    Entry* e = entries[batch.items.front()];
    t.copied_in = Clock::now();
    device_mark(mem);  // nothing to pack
    reduce(e->input, e->output);
    device_mark(mem);
    return batch.bytes;
  }
  auto* buffer = static_cast<std::byte*>(device_buffer(dev, batch.bytes));
  size_t offset = 0;
  for (size_t i : batch.items) {
    const size_t bytes = cycle.ready[i].request.bytes();
    LOCKSTEP_DCHECK_LE(offset + bytes, batch.bytes, "fusion buffer: item {} overruns", i);
    mem.copy(buffer + offset, entries[i]->input, bytes);
    offset += bytes;
  }
  LOCKSTEP_DCHECK_EQ(offset, batch.bytes);  // fusion.cc sized the batch from the same items
  t.copied_in = Clock::now();
  device_mark(mem);
  reduce(buffer, buffer);
  device_mark(mem);
  offset = 0;
  for (size_t i : batch.items) {
    const size_t bytes = cycle.ready[i].request.bytes();
    mem.copy(entries[i]->output, buffer + offset, bytes);
    offset += bytes;
  }
  LOCKSTEP_DCHECK_EQ(offset, batch.bytes);
  return batch.bytes;
}

}  // namespace lockstep::engine::detail
