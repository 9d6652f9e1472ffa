// Making NCCL communicators (nccl_backend.h, "Bootstrap"): the world's
// through the host transport, a subset's through its parent.
#include <unistd.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "comm/backend_factory.h"
#include "comm/kit/liveness.h"
#include "comm/transport/nccl/nccl_backend.h"
#include "comm/transport/nccl/nccl_comm.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm::nccl {
namespace {

// The GPU current in this thread (the placement chose it).
int current_device() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    throw InvalidArgument(fmt::format(
        "nccl backend: no usable GPU ({}); choose a host backend (LOCKSTEP_BACKEND=auto or shm)",
        err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none"));
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

PeerRecord my_record(int device) {
  PeerRecord mine;
  mine.pid = getpid();
  mine.device = device;
  std::string host = host_label();
  std::strncpy(mine.host, host.c_str(), sizeof mine.host - 1);
  cuda_check(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, device),
             "cudaDeviceGetPCIBusId");
  return mine;
}

ncclUniqueId new_id() {
  ncclUniqueId id{};
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    throw Error(fmt::format("nccl backend: ncclGetUniqueId: {}", nccl_text(r, nullptr)));
  return id;
}

// NCCL refuses two ranks on one GPU with "Duplicate GPU detected" deep in
// its init; say which ranks and what to do instead.
void check_distinct_gpus(const std::vector<PeerRecord>& peers) {
  for (size_t a = 0; a < peers.size(); ++a)
    for (size_t b = a + 1; b < peers.size(); ++b)
      if (std::strcmp(peers[a].host, peers[b].host) == 0 &&
          std::strcmp(peers[a].bus_id, peers[b].bus_id) == 0)
        throw InvalidArgument(fmt::format(
            "nccl backend: ranks {} and {} both use GPU {} (bus {}) on host {}; NCCL needs one "
            "GPU per rank. Run at most one rank per GPU, or use a host backend "
            "(LOCKSTEP_BACKEND=shm stages device buffers through host memory)",
            a, b, peers[a].device, peers[a].bus_id, peers[a].host));
}

// Rank 0's id to every rank, and every rank's record to every rank, through
// a host communicator that lives only for the exchange.
std::vector<PeerRecord> exchange(const WorldInfo& world, const std::string& tag, int device,
                                 ncclUniqueId* id) {
  std::vector<PeerRecord> peers(world.size);
  PeerRecord mine = my_record(device);
  if (world.rank == 0) *id = new_id();
  if (world.size == 1) {
    peers[0] = mine;
    return peers;
  }
  auto host = comm::make_backend("auto", world, tag + "nccl");
  host->broadcast(id, sizeof *id, DataType::kUInt8, 0);
  std::vector<size_t> counts(world.size, sizeof(PeerRecord));
  host->allgatherv(&mine, peers.data(), counts, DataType::kUInt8);
  return peers;
}

// Pids of the peers on this host, 0 for the others.
std::vector<int> local_pids(const std::vector<PeerRecord>& peers, int self) {
  std::vector<int> pids(peers.size(), 0);
  for (size_t r = 0; r < peers.size(); ++r)
    if (std::strcmp(peers[r].host, peers[self].host) == 0) pids[r] = static_cast<int>(peers[r].pid);
  return pids;
}

}  // namespace

std::unique_ptr<Backend> connect(const WorldInfo& world, int device, const ncclUniqueId& id,
                                 std::vector<PeerRecord> peers) {
  check_distinct_gpus(peers);
  auto watchdog = std::make_unique<Watchdog>(
      kit::WaitPolicy::from_knobs(world.local_size),
      kit::PeerLiveness(local_pids(peers, world.rank), world.rank), world.rank, world.size);
  // Non-blocking by default, so that no NCCL call (init included: it
  // connects to the peers) can block this thread past the watchdog's
  // deadline; LOCKSTEP_NCCL_BLOCKING=1 trades that for NCCL's cheaper
  // blocking enqueue.
  const bool blocking = knob_bool("LOCKSTEP_NCCL_BLOCKING");
  watchdog->set_blocking(blocking);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  const Clock::time_point start = Clock::now();
  ncclResult_t r = ncclCommInitRankConfig(&comm, world.size, id, world.rank, &config);
  watchdog->set_comm(comm);
  watchdog->settle(r, "ncclCommInitRank (connecting to the peers)", start);
  return std::make_unique<NcclBackend>(std::move(watchdog), device, world.rank, world.size,
                                       knob_bool("LOCKSTEP_VERIFY_OPS"), std::move(peers));
}

std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag) {
  const int device = current_device();
  DeviceGuard guard(device);
  ncclUniqueId id{};
  std::vector<PeerRecord> peers = exchange(world, tag, device, &id);
  return connect(world, device, id, std::move(peers));
}

std::unique_ptr<Backend> make_subset(Backend& parent, std::span<const int> ranks,
                                     const WorldInfo& sub, const std::string& tag) {
  // The Communicator's backend may wrap an NcclBackend (a test's staging
  // adapter): then rendezvous afresh, as transports without make_subset do.
  if (auto* nccl = dynamic_cast<NcclBackend*>(&parent)) return nccl->subset(ranks, sub);
  return make_backend(sub, tag);
}

std::unique_ptr<Backend> NcclBackend::subset(std::span<const int> ranks, const WorldInfo& sub) {
  DeviceGuard guard(device_);
  watchdog_->check_usable();
  ncclUniqueId id = sub.rank == 0 ? new_id() : ncclUniqueId{};
  if (ranks.size() > 1) {
    void* d = allocate(sizeof id);
    if (sub.rank == 0)
      cuda("split", cudaMemcpyAsync(d, &id, sizeof id, cudaMemcpyHostToDevice, stream_));
    ncclComm_t comm = watchdog_->comm();
    enqueued("split", grouped([&](auto keep) {
               if (sub.rank != 0) {
                 keep(ncclRecv(d, sizeof id, ncclUint8, ranks[0], comm, stream_));
                 return;
               }
               for (size_t i = 1; i < ranks.size(); ++i)
                 keep(ncclSend(d, sizeof id, ncclUint8, ranks[i], comm, stream_));
             }));
    wait_stream("split");
    // Pageable: returns once copied; the stream is idle, so it cannot hang.
    if (sub.rank != 0) cuda_check(cudaMemcpy(&id, d, sizeof id, cudaMemcpyDeviceToHost), "split");
    free(d);
  }
  std::vector<PeerRecord> members;
  for (int r : ranks) members.push_back(peers_[r]);
  return connect(sub, device_, id, std::move(members));
}

}  // namespace lockstep::comm::nccl
