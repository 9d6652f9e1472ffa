#include "lockstep/comm/communicator.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "comm/backend_factory.h"
#include "comm/transport/transport.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/comm/traffic.h"

namespace lockstep::comm {
namespace {

// Argument checks run before any communication, so a bad call fails on the
// calling rank alone with a message naming the op and the argument.
void check_dtype(const char* op, DataType dtype) {
  if (!is_valid(dtype))
    throw InvalidArgument(fmt::format("{}: unknown dtype value {}", op, static_cast<int>(dtype)));
}

void check_op(const char* op, ReduceOp rop) {
  if (!is_valid(rop))
    throw InvalidArgument(fmt::format("{}: unknown reduce op value {}", op, static_cast<int>(rop)));
}

void check_buffer(const char* op, const char* which, const void* p, size_t count) {
  if (p == nullptr && count > 0)
    throw InvalidArgument(fmt::format("{}: {} buffer is null but count is {}", op, which, count));
}

void check_root(const char* op, int root, int size) {
  if (root < 0 || root >= size)
    throw InvalidArgument(fmt::format("{}: root {} is out of range [0, {})", op, root, size));
}

void check_peer(const char* op, int peer, int rank, int size) {
  if (peer < 0 || peer >= size)
    throw InvalidArgument(fmt::format("{}: peer rank {} is out of range [0, {})", op, peer, size));
  if (peer == rank)
    throw InvalidArgument(
        fmt::format("{}: peer rank {} is this rank; send/recv need a distinct "
                    "peer",
                    op, peer));
}

void check_counts(const char* op, const char* which, std::span<const size_t> counts, int size) {
  if (counts.size() != static_cast<size_t>(size))
    throw InvalidArgument(fmt::format("{}: {} has {} entries but the communicator has {} ranks", op,
                                      which, counts.size(), size));
}

size_t sum(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

std::vector<size_t> in_bytes(std::span<const size_t> counts, DataType dtype) {
  std::vector<size_t> out(counts.begin(), counts.end());
  for (auto& c : out) c *= dtype_size(dtype);
  return out;
}

}  // namespace

bool Communicator::has_backend(std::string_view name) { return find_transport(name) != nullptr; }

std::unique_ptr<Communicator> Communicator::create(const WorldInfo& world) {
  return create(world, knob_string("LOCKSTEP_BACKEND"));
}

std::unique_ptr<Communicator> Communicator::create(const WorldInfo& world,
                                                   std::string_view backend) {
  world.validate();
  set_log_rank(world.size > 1 ? world.rank : -1);
  auto impl = make_backend(backend, world, "w");
  if (world.rank == 0)
    log(LogLevel::kInfo, "backend {} (requested {}), {} ranks on {} host(s)", impl->name(), backend,
        world.size, world.cross_size);
  return std::make_unique<Communicator>(world, std::move(impl));
}

std::unique_ptr<Communicator> Communicator::from_environment() {
  return create(WorldInfo::from_environment());
}

Communicator::Communicator(WorldInfo world, std::unique_ptr<Backend> backend)
    : world_(std::move(world)), backend_(std::move(backend)) {}

namespace {

// After a peer failure or timeout the backend must not wait for its peers
// again (a goodbye barrier at destruction would hold this rank for its whole
// timeout before the error reaches the user).
template <typename Call>
void guarded(Backend& backend, Call call) {
  try {
    call();
  } catch (const PeerFailure&) {
    backend.abandon();
    throw;
  } catch (const Aborted&) {
    backend.abandon();
    throw;
  } catch (const TimeoutError&) {
    backend.abandon();
    throw;
  }
}

}  // namespace

Communicator::~Communicator() = default;

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                             ReduceOp op) {
  check_dtype("allreduce", dtype);
  check_op("allreduce", op);
  check_buffer("allreduce", "send", send, count);
  check_buffer("allreduce", "recv", recv, count);
  const uint64_t bytes = count * dtype_size(dtype);
  detail::count_traffic(bytes, wire::allreduce(bytes, size()));
  guarded(*backend_, [&] { backend_->allreduce(send, recv, count, dtype, op); });
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          int root) {
  check_dtype("reduce", dtype);
  check_op("reduce", op);
  check_root("reduce", root, size());
  check_buffer("reduce", "send", send, count);
  if (rank() == root) check_buffer("reduce", "recv", recv, count);
  const uint64_t bytes = count * dtype_size(dtype);
  detail::count_traffic(bytes, wire::reduce(bytes, size()));
  guarded(*backend_, [&] { backend_->reduce(send, recv, count, dtype, op, root); });
}

void Communicator::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  check_dtype("broadcast", dtype);
  check_root("broadcast", root, size());
  check_buffer("broadcast", "data", buffer, count);
  const uint64_t bytes = count * dtype_size(dtype);
  detail::count_traffic(rank() == root ? bytes : 0, wire::broadcast(bytes, rank(), root, size()));
  guarded(*backend_, [&] { backend_->broadcast(buffer, count, dtype, root); });
}

void Communicator::allgather(const void* send, void* recv, size_t count, DataType dtype) {
  std::vector<size_t> counts(size(), count);
  allgatherv(send, recv, counts, dtype);
}

void Communicator::allgatherv(const void* send, void* recv, std::span<const size_t> recv_counts,
                              DataType dtype) {
  check_dtype("allgather", dtype);
  check_counts("allgather", "recv_counts", recv_counts, size());
  check_buffer("allgather", "send", send, recv_counts[rank()]);
  check_buffer("allgather", "recv", recv, sum(recv_counts));
  const auto blocks = in_bytes(recv_counts, dtype);
  detail::count_traffic(blocks[rank()], wire::allgatherv(blocks, rank()));
  guarded(*backend_, [&] { backend_->allgatherv(send, recv, recv_counts, dtype); });
}

void Communicator::gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  check_dtype("gather", dtype);
  check_root("gather", root, size());
  check_buffer("gather", "send", send, count);
  if (rank() == root) check_buffer("gather", "recv", recv, count * size());
  std::vector<size_t> counts(size(), count);
  const uint64_t bytes = count * dtype_size(dtype);
  detail::count_traffic(bytes, rank() == root ? 0 : bytes);
  guarded(*backend_, [&] { backend_->gatherv(send, recv, counts, dtype, root); });
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  check_dtype("scatter", dtype);
  check_root("scatter", root, size());
  if (rank() == root) check_buffer("scatter", "send", send, count * size());
  check_buffer("scatter", "recv", recv, count);
  const uint64_t block = count * dtype_size(dtype);
  const uint64_t sent = rank() == root ? block * static_cast<uint64_t>(size() - 1) : 0;
  detail::count_traffic(sent, sent);
  guarded(*backend_, [&] { backend_->scatter(send, recv, count, dtype, root); });
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                                  ReduceOp op) {
  check_dtype("reduce_scatter", dtype);
  check_op("reduce_scatter", op);
  check_buffer("reduce_scatter", "send", send, recv_count * size());
  check_buffer("reduce_scatter", "recv", recv, recv_count);
  const uint64_t bytes = recv_count * static_cast<uint64_t>(size()) * dtype_size(dtype);
  detail::count_traffic(bytes, wire::reduce_scatter(bytes, size()));
  guarded(*backend_, [&] { backend_->reduce_scatter(send, recv, recv_count, dtype, op); });
}

void Communicator::alltoall(const void* send, void* recv, size_t count, DataType dtype) {
  std::vector<size_t> counts(size(), count);
  alltoallv(send, counts, recv, counts, dtype);
}

void Communicator::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DataType dtype) {
  check_dtype("alltoall", dtype);
  check_counts("alltoall", "send_counts", send_counts, size());
  check_counts("alltoall", "recv_counts", recv_counts, size());
  check_buffer("alltoall", "send", send, sum(send_counts));
  check_buffer("alltoall", "recv", recv, sum(recv_counts));
  if (send_counts[rank()] != recv_counts[rank()])
    throw InvalidArgument(
        fmt::format("alltoall: this rank sends itself {} elements but expects {} from itself",
                    send_counts[rank()], recv_counts[rank()]));
  if (send == recv && sum(send_counts) > 0)
    throw InvalidArgument("alltoall: send and recv must not be the same buffer");
  const auto blocks = in_bytes(send_counts, dtype);
  detail::count_traffic(sum(blocks), wire::alltoallv(blocks, rank()));
  guarded(*backend_, [&] { backend_->alltoallv(send, send_counts, recv, recv_counts, dtype); });
}

void Communicator::barrier() {
  guarded(*backend_, [&] { backend_->barrier(); });
}

void Communicator::send(const void* buffer, size_t count, DataType dtype, int dst, int tag) {
  check_dtype("send", dtype);
  check_peer("send", dst, rank(), size());
  check_buffer("send", "data", buffer, count);
  const uint64_t bytes = count * dtype_size(dtype);
  detail::count_traffic(bytes, bytes);
  guarded(*backend_, [&] { backend_->send(buffer, count, dtype, dst, tag); });
}

void Communicator::recv(void* buffer, size_t count, DataType dtype, int src, int tag) {
  check_dtype("recv", dtype);
  check_peer("recv", src, rank(), size());
  check_buffer("recv", "data", buffer, count);
  guarded(*backend_, [&] { backend_->recv(buffer, count, dtype, src, tag); });
}

std::unique_ptr<Communicator> Communicator::split(std::span<const int> ranks,
                                                  std::string_view tag) {
  if (ranks.empty()) throw InvalidArgument("split: the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size())
      throw InvalidArgument(
          fmt::format("split: rank {} is out of range [0, {})", ranks[i], size()));
    if (i > 0 && ranks[i] <= ranks[i - 1])
      throw InvalidArgument("split: ranks must be ascending and distinct");
  }
  auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end())
    throw InvalidArgument(fmt::format("split: rank {} is not a member of the subset", rank()));
  for (char c : tag)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      throw InvalidArgument(fmt::format("split: tag '{}' may only hold letters and digits", tag));
  WorldInfo sub = world_;
  sub.rank = static_cast<int>(me - ranks.begin());
  sub.size = static_cast<int>(ranks.size());
  sub.local_rank = sub.rank;
  sub.local_size = sub.size;
  sub.cross_rank = 0;
  sub.cross_size = 1;
  sub.job_id = fmt::format("{}-s{}", world_.job_id, tag);
  return std::make_unique<Communicator>(sub, make_subset_backend(*backend_, ranks, sub, "w"));
}

}  // namespace lockstep::comm
