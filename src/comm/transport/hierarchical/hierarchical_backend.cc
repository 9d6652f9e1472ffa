#include "comm/transport/hierarchical/hierarchical_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/kernels/reduce.h"
#include "comm/kit/liveness.h"
#include "comm/transport/hierarchical/hierarchical_comm.h"
#include "comm/transport/shm/shm_backend.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/log.h"
#include "lockstep/policy/hierarchical.h"

namespace lockstep::comm::hierarchical {
namespace {

constexpr int kFields = 5;  // per rank: cross_rank, local_rank, local_size, cross_size, host

struct Layout {
  int cross_rank = 0, local_rank = 0, local_size = 1, cross_size = 1;
};

// Why the ranks' declared host layout cannot be split into equal hosts, or "".
std::string layout_problem(const std::vector<int64_t>& all, int size) {
  int64_t local_size = all[2], cross_size = all[3];
  if (local_size * cross_size != size)
    return fmt::format("{} hosts x {} ranks per host != {} ranks", cross_size, local_size, size);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int r = 0; r < size; ++r) {
    const int64_t* v = &all[kFields * r];
    if (v[2] != local_size || v[3] != cross_size)
      return fmt::format("rank {} reports {} ranks on {} hosts, rank 0 {} on {}", r, v[2], v[3],
                         local_size, cross_size);
    if (v[0] < 0 || v[0] >= cross_size || v[1] < 0 || v[1] >= local_size ||
        !seen.insert({v[0], v[1]}).second)
      return fmt::format("rank {} has host {} local rank {}, out of range or repeated", r, v[0],
                         v[1]);
  }
  return "";
}

// The layout from the host names alone (hosts in order of their first
// rank), for launchers whose variables do not say which host is which (under
// mpirun there is no host-index variable). Empty when hosts differ in size.
std::optional<Layout> layout_from_hosts(const std::vector<int64_t>& all, int size, int rank) {
  std::vector<int64_t> hosts;
  std::vector<int> per_host;
  Layout mine;
  for (int r = 0; r < size; ++r) {
    int64_t h = all[kFields * r + 4];
    auto it = std::find(hosts.begin(), hosts.end(), h);
    int index = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(h);
      per_host.push_back(0);
    }
    if (r == rank) mine = {index, per_host[index], 0, 0};
    ++per_host[index];
  }
  for (int n : per_host)
    if (n != per_host[0]) return std::nullopt;
  mine.local_size = per_host[0];
  mine.cross_size = static_cast<int>(hosts.size());
  return mine;
}

// The launcher's name for the host when it gave one: network namespaces (and
// containers) on one machine share the kernel's host name.
// Where rank r sits: its declared layout, or (when the declared one was
// inconsistent and `mine` was derived from host names) the derived one.
Layout layout_of(const std::vector<int64_t>& all, int r, const WorldInfo& world,
                 const Layout& mine) {
  if (layout_problem(all, world.size).empty()) {
    const int64_t* v = &all[kFields * r];
    return {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]),
            static_cast<int>(v[3])};
  }
  auto derived = layout_from_hosts(all, world.size, r);
  return derived ? *derived : mine;
}

int64_t host_hash() { return static_cast<int64_t>(std::hash<std::string>{}(host_label()) >> 1); }

// A job id shared by every rank, naming the hosts' shared-memory segments.
std::string shared_job_id(Backend& flat, const WorldInfo& world) {
  if (!world.job_id.empty()) return world.job_id;
  int64_t pid = getpid();
  flat.broadcast(&pid, 1, DataType::kInt64, 0);
  return fmt::format("h{}", pid);
}

}  // namespace

// Note [Hierarchical fallback] in hierarchical_backend.h.
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag,
                                      const Transport& cross, bool only_if_useful) {
  std::unique_ptr<Backend> flat = cross.make(world, tag);
  int64_t mine[kFields] = {world.cross_rank, world.local_rank, world.local_size, world.cross_size,
                           host_hash()};
  std::vector<int64_t> all(kFields * static_cast<size_t>(world.size));
  flat->allgatherv(mine, all.data(), std::vector<size_t>(world.size, kFields), DataType::kInt64);
  Layout layout{world.cross_rank, world.local_rank, world.local_size, world.cross_size};
  if (std::string problem = layout_problem(all, world.size); !problem.empty()) {
    auto derived = layout_from_hosts(all, world.size, world.rank);
    if (!derived) {
      if (world.rank == 0 && !only_if_useful)
        log(LogLevel::kWarning,
            "hierarchical allreduce disabled, using flat {}: {}, and the "
            "hosts hold different numbers of ranks",
            cross.name, problem);
      return flat;
    }
    layout = *derived;
  }
  if (only_if_useful && !policy::hierarchical_taken(policy::HierarchicalMode::kAuto,
                                                    layout.cross_size, layout.local_size))
    return flat;
  std::string job = shared_job_id(*flat, world);
  WorldInfo host;
  host.rank = host.local_rank = layout.local_rank;
  host.size = host.local_size = layout.local_size;
  host.job_id = job;
  // Distinct segment per (fake or real) host: the hosts may share /dev/shm.
  auto local = shm::make_backend(host, fmt::format("{}h{}", tag, layout.cross_rank));
  WorldInfo group = world;
  group.rank = group.cross_rank = layout.cross_rank;
  group.size = group.cross_size = layout.cross_size;
  group.local_rank = 0;
  group.local_size = 1;
  auto across = cross.make_group(*flat, layout.local_rank, layout.cross_rank, group,
                                 fmt::format("{}x{}", tag, layout.local_rank));
  std::vector<int> local_ranks(layout.local_size, -1), cross_ranks(layout.cross_size, -1);
  for (int r = 0; r < world.size; ++r) {
    auto r_layout = layout_of(all, r, world, layout);
    if (r_layout.cross_rank == layout.cross_rank) local_ranks[r_layout.local_rank] = r;
    if (r_layout.local_rank == layout.local_rank) cross_ranks[r_layout.cross_rank] = r;
  }
  return std::make_unique<HierarchicalBackend>(fmt::format("hierarchical-{}", cross.name),
                                               std::move(flat), std::move(local), std::move(across),
                                               std::move(local_ranks), std::move(cross_ranks));
}

Backend& flat_backend(Backend& b) {
  auto* h = dynamic_cast<HierarchicalBackend*>(&b);
  if (!h) throw InvalidArgument(fmt::format("{} is not a hierarchical backend", b.name()));
  return h->flat();
}

HierarchicalBackend::HierarchicalBackend(std::string name, std::unique_ptr<Backend> flat,
                                         std::unique_ptr<Backend> local,
                                         std::unique_ptr<Backend> cross,
                                         std::vector<int> local_ranks, std::vector<int> cross_ranks)
    : name_(std::move(name)),
      flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      local_ranks_(std::move(local_ranks)),
      cross_ranks_(std::move(cross_ranks)) {}

// The stages' backends number their ranks within the host or the cross
// group; a failure there is re-raised naming the global rank. After any
// failure no part waits for peers again (the flat backend's goodbye barrier
// would hold a failing rank for its whole timeout).

template <typename Stage>
void HierarchicalBackend::run_stage(const char* what, Backend& group,
                                    const std::vector<int>& global, Stage stage) {
  try {
    stage(group);
  } catch (const PeerFailure& e) {
    abandon();
    int lost = e.rank() >= 0 && e.rank() < static_cast<int>(global.size()) ? global[e.rank()] : -1;
    std::vector<std::string> map;
    for (size_t i = 0; i < global.size(); ++i) map.push_back(fmt::format("{}={}", i, global[i]));
    throw PeerFailure(lost, fmt::format("{} [{} stage of the hierarchical allreduce; its ranks "
                                        "are global ranks {}{}]",
                                        e.what(), what, fmt::join(map, ", "),
                                        lost >= 0 ? fmt::format(": global rank {} failed", lost)
                                                  : std::string()));
  }
}

void HierarchicalBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op) {
  size_t hosts_ranks = static_cast<size_t>(local_->size());
  bool int_average = op == ReduceOp::kAverage && !is_floating(dtype);
  if (policy::hierarchical_goes_flat(count, static_cast<int>(hosts_ranks), int_average))
    return flat_->allreduce(send, recv, count, dtype, op);
  size_t es = dtype_size(dtype);
  size_t block = (count + hosts_ranks - 1) / hosts_ranks;
  bool exact = block * hosts_ranks == count;
  // Padding is reduced like data and then dropped, so its value is irrelevant.
  const void* input = send;
  if (!exact) {
    padded_.assign(block * hosts_ranks * es, std::byte{0});
    std::memcpy(padded_.data(), send, count * es);
    input = padded_.data();
  }
  slice_.resize(block * es);
  ReduceOp sum_or_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  run_stage("shared-memory reduce-scatter", *local_, local_ranks_,
            [&](Backend& b) { b.reduce_scatter(input, slice_.data(), block, dtype, sum_or_op); });
  run_stage("cross-host allreduce", *cross_, cross_ranks_, [&](Backend& b) {
    b.allreduce(slice_.data(), slice_.data(), block, dtype, sum_or_op);
  });
  if (op == ReduceOp::kAverage) {
    const void* in[1] = {slice_.data()};
    kernels::reduce(dtype, ReduceOp::kAverage, in, 1, slice_.data(), block, size());
  }
  void* gathered = exact ? recv : padded_.data();
  run_stage("shared-memory allgather", *local_, local_ranks_, [&](Backend& b) {
    b.allgatherv(slice_.data(), gathered, std::vector<size_t>(hosts_ranks, block), dtype);
  });
  if (!exact) std::memcpy(recv, padded_.data(), count * es);
}

}  // namespace lockstep::comm::hierarchical
