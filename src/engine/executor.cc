#include "engine/executor.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "engine/scaling.h"
#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::engine::detail {

size_t row_elements(const Shape& shape) {
  if (shape.empty()) return 1;
  return static_cast<size_t>(num_elements(Shape(shape.begin() + 1, shape.end())));
}

Shape with_rows(const Shape& shape, int64_t rows) {
  Shape out = shape.empty() ? Shape{0} : shape;
  out[0] = rows;
  return out;
}

void* Executor::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void* Executor::allocate(Entry* entry, const Shape& shape, DataType dtype,
                         std::exception_ptr& error) {
  size_t bytes = static_cast<size_t>(num_elements(shape)) * comm::dtype_size(dtype);
  if (entry && entry->allocate) {
    try {
      void* p = entry->allocate(shape, dtype);
      if (p || bytes == 0) return p;
      throw InvalidArgument(fmt::format("{} '{}': the allocator returned null for shape {}",
                                        collective_name(entry->request.collective),
                                        entry->request.name, format_shape(shape)));
    } catch (...) {
      error = std::current_exception();
    }
  }
  return scratch(bytes);  // the collective must still run: the peers expect us
}

// Note [One body per collective]
// Each collective's body (how counts and output shapes follow from the
// negotiated per-rank shapes, the uneven reduce-scatter, the received
// splits) is written once, against a Target: the host's communicator and
// memory or the device's. Only what is the device's alone stays in
// executor_device.cc: the ready events, the stream, the one host wait, the
// allreduce whose scale factors fold into the device's reduction. A
// collective without a case in run_body is an error on both paths (a new
// data-carrying collective added as docs/extending.md says must not
// complete without moving a byte); the switch has no default, so the
// compiler names a missing case (-Wswitch) before the test does.
size_t Executor::run_body(const Target& target, const Batch& batch, const CycleResult& cycle,
                          std::span<Entry* const> entries, std::span<std::exception_ptr> errors,
                          Times& t) {
  const size_t i0 = batch.items.front();
  const ReadyItem& first = cycle.ready[i0];
  switch (first.request.collective) {
    case Collective::kAllreduce:
      return target.device ? device_allreduce(target.comm, batch, cycle, entries, t)
                           : allreduce(batch, cycle, entries, t);
    case Collective::kAllgather: return allgather(target, first, cycle, entries[i0], errors[i0]);
    case Collective::kBroadcast: return broadcast(target, first, entries[i0]);
    case Collective::kAlltoall: return alltoall(target, first, entries[i0], errors[i0]);
    case Collective::kReduceScatter: return reduce_scatter(target, first, entries[i0], errors[i0]);
    case Collective::kBarrier:
    case Collective::kJoin: return 0;        // no data: negotiation already synchronized every rank
    case Collective::kAddProcessSet: break;  // the worker runs it (never batched here)
  }
  // Every rank has the same batch (negotiated): its entries fail alike.
  auto error = std::make_exception_ptr(Error(fmt::format(
      "{} '{}': the executor has no body for collective {} on the {} path; add its case to "
      "Executor::run_body (docs/extending.md, 'A collective in the engine', step 4)",
      collective_name(first.request.collective), first.request.name,
      static_cast<int>(first.request.collective), target.device ? "device" : "host")));
  for (size_t i : batch.items)
    if (entries[i]) errors[i] = error;
  return 0;
}

Target Executor::host_target() {
  return {
      .comm = comm_,
      .device = false,
      .allocate = [this](Entry* e, const Shape& shape, DataType dtype,
                         std::exception_ptr& error) { return allocate(e, shape, dtype, error); },
      .scratch = [this](size_t bytes) { return scratch(bytes); },
      .copy =
          [](void* dst, const void* src, size_t bytes) {
            if (bytes > 0) std::memcpy(dst, src, bytes);
          }};
}

size_t Executor::run(const Batch& batch, const CycleResult& cycle, std::span<Entry* const> entries,
                     std::span<std::exception_ptr> errors) {
  const ReadyItem& first = cycle.ready[batch.items.front()];
  Times t;
  t.start = t.data_ready = Clock::now();
  size_t bytes = 0;
  if (first.request.memory == comm::MemoryKind::kCuda) {
    bytes = run_on_device(batch, cycle, entries, errors, t);
    if (timeline_ && timeline_->active()) record(batch, entries, t);
    return bytes;
  }
  bytes = run_body(host_target(), batch, cycle, entries, errors, t);
  if (first.request.collective != Collective::kAllreduce) {
    t.copied_in = t.start;
    t.reduced = t.copied_out = Clock::now();
  }
  if (timeline_ && timeline_->active()) record(batch, entries, t);
  return bytes;
}

size_t Executor::allreduce(const Batch& batch, const CycleResult& cycle,
                           std::span<Entry* const> entries, Times& t) {
  const Request& req = cycle.ready[batch.items.front()].request;
  const int contributors = comm_.size() - cycle.num_joined;
  const size_t esize = comm::dtype_size(req.dtype);
  const size_t total = batch.bytes / esize;
  std::byte* buffer;
  const void* source = nullptr;  // set: reduce out of place from the caller's input
  if (!batch.fused() && entries[batch.items.front()]) {
    Entry* e = entries[batch.items.front()];
    buffer = static_cast<std::byte*>(e->output);
    if (req.prescale == 1.0)
      source = e->input;
    else
      copy_scaled(e->input, buffer, total, req.dtype, req.prescale);
  } else {
    if (fusion_.size() < batch.bytes) fusion_.resize(batch.bytes);
    buffer = fusion_.data();
    size_t offset = 0;
    for (size_t i : batch.items) {
      size_t count = cycle.ready[i].request.bytes() / esize;
      LOCKSTEP_DCHECK_LE(offset + count * esize, batch.bytes, "fusion buffer: item {} overruns", i);
      if (Entry* e = entries[i])
        copy_scaled(e->input, buffer + offset, count, req.dtype, req.prescale);
      else
        fill_neutral(buffer + offset, count, req.dtype, req.op);
      offset += count * esize;
    }
    LOCKSTEP_DCHECK_EQ(offset, batch.bytes);  // fusion.cc sized the batch from the same items
  }
  t.copied_in = Clock::now();
  if (!source) source = buffer;
  // A plain average lets the transport divide inside its reduction pass
  // instead of a second pass here. Chosen from replicated data only, so fused
  // and unfused batches still compute every element the same way.
  if (req.op == ReduceOp::kAverage && req.postscale == 1.0 && cycle.num_joined == 0) {
    comm_.allreduce(source, buffer, total, req.dtype, ReduceOp::kAverage);
  } else if (req.op == ReduceOp::kAverage && cycle.num_joined > 0 &&
             !comm::is_floating(req.dtype)) {
    // Replicated choice too (num_joined, dtype): see widen_to_i64.
    wide_.resize(total);
    widen_to_i64(source, total, req.dtype, wide_.data());
    comm_.allreduce(wide_.data(), wide_.data(), total, DataType::kInt64, ReduceOp::kSum);
    finish_reduction(wide_.data(), total, DataType::kInt64, req.op, req.postscale, contributors);
    narrow_from_i64(wide_.data(), total, req.dtype, buffer);
  } else {
    comm_.allreduce(source, buffer, total, req.dtype, wire_op(req.op));
    finish_reduction(buffer, total, req.dtype, req.op, req.postscale, contributors);
  }
  t.reduced = Clock::now();
  if (buffer == fusion_.data()) {
    size_t offset = 0;
    for (size_t i : batch.items) {
      size_t bytes = cycle.ready[i].request.bytes();
      LOCKSTEP_DCHECK_LE(offset + bytes, batch.bytes, "fusion buffer: item {} overruns", i);
      if (Entry* e = entries[i]; e && bytes > 0) std::memcpy(e->output, buffer + offset, bytes);
      offset += bytes;
    }
    LOCKSTEP_DCHECK_EQ(offset, batch.bytes);
  }
  t.copied_out = Clock::now();
  return batch.bytes;
}

// Rows of every rank (none from a joined rank) into a new tensor.
size_t Executor::allgather(const Target& target, const ReadyItem& item, const CycleResult& cycle,
                           Entry* entry, std::exception_ptr& error) {
  const Request& req = item.request;
  comm::Communicator& comm = target.comm;
  const size_t row = row_elements(req.shape);
  std::vector<size_t> counts(comm.size());
  int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) {
    int64_t n = cycle.joined[r] || item.per_rank[r].shape.empty() ? 0 : item.per_rank[r].shape[0];
    counts[r] = static_cast<size_t>(n) * row;
    rows += n;
  }
  Shape out_shape = with_rows(req.shape, rows);
  void* out = target.allocate(entry, out_shape, req.dtype, error);
  comm.allgatherv(entry ? entry->input : nullptr, out, counts, req.dtype);
  if (entry) entry->state->output_shape = out_shape;
  return static_cast<size_t>(rows) * row * comm::dtype_size(req.dtype);
}

size_t Executor::broadcast(const Target& target, const ReadyItem& item, Entry* entry) {
  const Request& req = item.request;
  size_t count = static_cast<size_t>(num_elements(req.shape));
  void* buffer = entry ? entry->output : target.scratch(req.bytes());
  target.comm.broadcast(buffer, count, req.dtype, req.root);
  if (entry) entry->state->output_shape = req.shape;
  return req.bytes();
}

// Each rank's splits exchanged into a new tensor; the splits received kept.
size_t Executor::alltoall(const Target& target, const ReadyItem& item, Entry* entry,
                          std::exception_ptr& error) {
  const Request& req = item.request;
  comm::Communicator& comm = target.comm;
  const int me = comm.rank();
  const size_t row = row_elements(req.shape);
  std::vector<size_t> send_counts(comm.size()), recv_counts(comm.size());
  std::vector<int64_t> received(comm.size());
  int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) {
    send_counts[r] = static_cast<size_t>(item.per_rank[me].splits[r]) * row;
    received[r] = item.per_rank[r].splits[me];
    recv_counts[r] = static_cast<size_t>(received[r]) * row;
    rows += received[r];
  }
  Shape out_shape = with_rows(req.shape, rows);
  void* out = target.allocate(entry, out_shape, req.dtype, error);
  comm.alltoallv(entry->input, send_counts, out, recv_counts, req.dtype);
  entry->state->output_shape = out_shape;
  entry->state->received_splits = std::move(received);
  return static_cast<size_t>(rows) * row * comm::dtype_size(req.dtype);
}

// This rank's rows of the reduction; rows that do not divide evenly go to
// the first ranks. On the host the op goes over the wire as wire_op() and
// the average is finished here; the device's transport applies it itself.
size_t Executor::reduce_scatter(const Target& target, const ReadyItem& item, Entry* entry,
                                std::exception_ptr& error) {
  const Request& req = item.request;
  comm::Communicator& comm = target.comm;
  const int n = comm.size(), me = comm.rank();
  const size_t row = row_elements(req.shape), esize = comm::dtype_size(req.dtype);
  const int64_t dim = req.shape.empty() ? 0 : req.shape[0];
  auto rows_of = [&](int r) { return dim / n + (r < dim % n ? 1 : 0); };
  Shape out_shape = with_rows(req.shape, rows_of(me));
  const size_t out_count = static_cast<size_t>(rows_of(me)) * row;
  const ReduceOp op = target.device ? req.op : wire_op(req.op);
  void* out = target.allocate(entry, out_shape, req.dtype, error);
  if (dim % n == 0) {
    comm.reduce_scatter(entry->input, out, out_count, req.dtype, op);
  } else {
    // Uneven rows: the transport's reduce_scatter wants equal blocks.
    const size_t total = static_cast<size_t>(dim) * row;
    auto* full = static_cast<std::byte*>(target.scratch(total * esize + 1));
    comm.allreduce(entry->input, full, total, req.dtype, op);
    int64_t before = 0;
    for (int r = 0; r < me; ++r) before += rows_of(r);
    target.copy(out, full + static_cast<size_t>(before) * row * esize, out_count * esize);
  }
  if (!target.device) finish_reduction(out, out_count, req.dtype, req.op, 1.0, n);
  entry->state->output_shape = out_shape;
  return req.bytes();
}

Executor::Executor(comm::Communicator& comm, Timeline* timeline,
                   const std::atomic<comm::Communicator*>* device)
    : comm_(comm), timeline_(timeline), device_(device) {}

std::string Executor::algorithm_of(const Batch& batch, const Request& request) const {
  if (request.collective != Collective::kAllreduce) return {};
  const size_t bytes = batch.fused() ? batch.bytes : request.bytes();
  return comm_.backend().allreduce_algorithm(bytes, comm::dtype_size(request.dtype), false);
}

void Executor::record(const Batch& batch, std::span<Entry* const> entries, const Times& t) {
  std::string algorithm = t.gpu_times ? "GPU time" : "";
  for (size_t i : batch.items) {
    Entry* e = entries[i];
    if (!e) continue;
    const std::string& name = e->request.name;
    if (algorithm.empty()) algorithm = algorithm_of(batch, e->request);
    timeline_->record(name, Phase::kWaitForData, e->ready, t.data_ready);
    timeline_->record(name, Phase::kFuseCopyIn, t.data_ready, t.copied_in);
    timeline_->record(name, Phase::kCollective, t.copied_in, t.reduced, algorithm);
    timeline_->record(name, Phase::kCopyOut, t.reduced, t.copied_out);
  }
  if (batch.fused())
    if (Entry* e = entries[batch.items.front()])
      timeline_->record(e->request.name, Phase::kMarker, t.start, t.start,
                        fmt::format("{} tensors, {} bytes", batch.items.size(), batch.bytes));
}

}  // namespace lockstep::engine::detail
