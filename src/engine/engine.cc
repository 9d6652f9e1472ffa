#include "lockstep/engine/engine.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include <fmt/format.h>

#include "engine/collective_traits.h"
#include "engine/flight_signal.h"
#include "engine/submission.h"
#include "engine/worker.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/base/mutex.h"

namespace lockstep::engine {

using detail::Entry;
using detail::ProcessSetWorker;

struct Engine::Impl {
  comm::WorldInfo world;
  detail::EngineContext ctx;
  Mutex mu;
  // Every set, member or not; the workers of the sets this rank is in.
  std::map<int, std::vector<int>> set_ranks LOCKSTEP_GUARDED_BY(mu);
  std::map<int, std::shared_ptr<ProcessSetWorker>> workers LOCKSTEP_GUARDED_BY(mu);
  int next_set_id LOCKSTEP_GUARDED_BY(mu) = 1;
  int add_calls LOCKSTEP_GUARDED_BY(mu) = 0;
  int remove_calls LOCKSTEP_GUARDED_BY(mu) = 0;
  std::set<int> removed LOCKSTEP_GUARDED_BY(mu);  // ids remove_process_set took away
  bool shut_down LOCKSTEP_GUARDED_BY(mu) = false;
  std::unique_ptr<comm::Communicator> device_comm LOCKSTEP_GUARDED_BY(mu);

  void check_device_submission(int set, const std::vector<Entry>& entries) {
    for (const Entry& e : entries) {
      const detail::Request& r = e.request;
      // Only data-carrying collectives have a device body (executor.cc,
      // Executor::run_body); anything else on CUDA buffers is refused here.
      if (static_cast<int>(r.collective) > static_cast<int>(Collective::kAddProcessSet) ||
          !detail::traits(r.collective).carries_data)
        throw InvalidArgument(fmt::format(
            "{} '{}': collective {} moves no data and has no CUDA path; submit it with host "
            "memory",
            collective_name(r.collective), r.name, static_cast<int>(r.collective)));
      if ((r.prescale != 1.0 || r.postscale != 1.0) && r.op != comm::ReduceOp::kSum &&
          r.op != comm::ReduceOp::kAverage)
        throw InvalidArgument(fmt::format(
            "{} '{}': scale factors with op {} are not supported on CUDA buffers (sum and "
            "average take them)",
            collective_name(r.collective), r.name, comm::reduce_op_name(r.op)));
    }
    if (set != 0)
      throw InvalidArgument(fmt::format(
          "engine: CUDA buffers travel in the global process set only (this one is in set {}); "
          "stage them through host memory (LOCKSTEP_DEVICE_BACKEND=host)",
          set));
    if (!ctx.device_comm.load())
      throw InvalidArgument(
          "engine: a CUDA buffer was submitted but no device communicator is set "
          "(Engine::set_device_communicator; the torch layer sets one for "
          "LOCKSTEP_DEVICE_BACKEND=nccl and otherwise stages CUDA tensors through host memory)");
  }

  std::shared_ptr<ProcessSetWorker> worker(int set) {
    MutexLock lock(mu);
    if (shut_down) throw InvalidArgument("engine: shut down; call init() again to use it");
    auto it = workers.find(set);
    if (it != workers.end()) return it->second;
    if (set_ranks.count(set))
      throw InvalidArgument(
          fmt::format("engine: rank {} is not a member of process set {} (ranks {})", world.rank,
                      set, fmt::join(set_ranks[set], ",")));
    if (removed.count(set))
      throw InvalidArgument(fmt::format(
          "engine: process set {} was removed (remove_process_set); add a new one", set));
    throw InvalidArgument(fmt::format("engine: no process set {}", set));
  }

  // Registers a set; members split `world_comm` and start its worker.
  int add_set(const std::vector<int>& ranks, comm::Communicator& world_comm) {
    int id;
    {
      MutexLock lock(mu);
      id = next_set_id++;
      set_ranks[id] = ranks;
    }
    if (std::find(ranks.begin(), ranks.end(), world.rank) == ranks.end()) return id;
    ctx.flight->set_members(id, ranks);
    auto sub = world_comm.split(ranks, fmt::format("ps{}", id));
    auto w = std::make_shared<ProcessSetWorker>(id, ranks, std::move(sub), ctx);
    MutexLock lock(mu);
    workers[id] = std::move(w);
    return id;
  }

  Handle submit(int set, std::vector<Entry> entries, OpOptions options) {
    auto w = worker(set);
    for (Entry& e : entries) {
      e.request.memory = options.memory;
      e.ready_event = options.ready_event;
    }
    if (options.memory == comm::MemoryKind::kCuda) check_device_submission(set, entries);
    auto state = std::make_shared<detail::OpState>(static_cast<int>(entries.size()),
                                                   std::move(options.on_done));
    state->waits = ctx.waits;
    auto now = detail::Clock::now();
    for (Entry& e : entries) detail::validate(e, w->set_size());
    for (Entry& e : entries) {  // all valid: now they are operations
      e.state = state;
      e.submitted = now;
      e.flight_id = ctx.flight->submitted(set, e.request);
    }
    w->submit(std::move(entries));
    ctx.waits->submissions.fetch_add(1);
    return Handle(state);
  }
};

Engine::Engine(std::unique_ptr<comm::Communicator> comm, EngineConfig config)
    : impl_(std::make_unique<Impl>()) {
  if (!comm) throw InvalidArgument("engine: null Communicator");
  impl_->world = comm->world();
  set_log_rank(impl_->world.rank);
  if (config.deterministic && config.autotune) {
    log(LogLevel::kInfo, "engine: LOCKSTEP_DETERMINISTIC=1 disables LOCKSTEP_AUTOTUNE");
    config.autotune = false;
  }
  impl_->ctx.flight = detail::make_flight_recorder(config, impl_->world);
  impl_->ctx.current_threshold = config.fusion_threshold;
  impl_->ctx.requested_threshold = config.fusion_threshold;
  impl_->ctx.config = std::move(config);
  impl_->ctx.add_process_set = [this](const std::vector<int32_t>& ranks, comm::Communicator& w) {
    return impl_->add_set(std::vector<int>(ranks.begin(), ranks.end()), w);
  };
  impl_->ctx.wake_all = [this] {
    MutexLock lock(impl_->mu);
    for (auto& [id, w] : impl_->workers) w->wake();
  };
  if (!impl_->ctx.config.timeline_path.empty() && rank() == 0)
    impl_->ctx.timeline.start(impl_->ctx.config.timeline_path);
  // Static sets split before the global worker starts, so this thread is
  // still the world communicator's only user.
  std::vector<int> all(impl_->world.size);
  for (int r = 0; r < impl_->world.size; ++r) all[r] = r;
  {
    MutexLock lock(impl_->mu);
    impl_->set_ranks[0] = all;
  }
  impl_->ctx.flight->set_members(0, all);
  std::vector<std::vector<int>> static_sets;  // all checked before any starts
  for (const auto& ranks : impl_->ctx.config.process_sets) {
    static_sets.push_back(detail::checked_set_ranks(ranks, impl_->world.size));
    // Two ids for one membership (Horovod refuses it too): every config is
    // the same on every rank, so every rank throws alike.
    auto first = std::find(static_sets.begin(), static_sets.end() - 1, static_sets.back());
    if (first != static_sets.end() - 1)
      throw InvalidArgument(fmt::format(
          "EngineConfig::process_sets: sets {} and {} both have ranks {}; list each set once "
          "(process sets are identified by their ranks)",
          first - static_sets.begin() + 1, static_sets.size(), fmt::join(static_sets.back(), ",")));
  }
  for (const auto& ranks : static_sets) impl_->add_set(ranks, *comm);
  auto global_worker = std::make_shared<ProcessSetWorker>(0, all, std::move(comm), impl_->ctx);
  MutexLock lock(impl_->mu);
  impl_->workers[0] = std::move(global_worker);
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  std::map<int, std::shared_ptr<ProcessSetWorker>> workers;
  {
    MutexLock lock(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    workers = impl_->workers;
  }
  for (auto& [id, w] : workers) w->request_stop();
  for (auto& [id, w] : workers) w->join();
  {
    MutexLock lock(impl_->mu);
    impl_->workers.clear();
    impl_->ctx.device_comm.store(nullptr);
    impl_->device_comm.reset();  // after the threads that used it are gone
  }
  impl_->ctx.timeline.stop();
}

void Engine::set_device_communicator(std::unique_ptr<comm::Communicator> comm) {
  if (!comm) throw InvalidArgument("engine: null device communicator");
  if (comm->memory() != comm::MemoryKind::kCuda || !comm->device_memory())
    throw InvalidArgument(fmt::format(
        "engine: the device communicator's backend '{}' moves host memory; give it a device "
        "backend (nccl)",
        comm->backend_name()));
  MutexLock lock(impl_->mu);
  if (impl_->device_comm) throw InvalidArgument("engine: the device communicator is already set");
  impl_->device_comm = std::move(comm);
  impl_->ctx.device_comm.store(impl_->device_comm.get());
}

bool Engine::has_device_communicator() const { return impl_->ctx.device_comm.load() != nullptr; }

int Engine::rank() const { return impl_->world.rank; }
int Engine::size() const { return impl_->world.size; }
int Engine::local_rank() const { return impl_->world.local_rank; }
int Engine::local_size() const { return impl_->world.local_size; }
int Engine::cross_rank() const { return impl_->world.cross_rank; }
int Engine::cross_size() const { return impl_->world.cross_size; }
const comm::WorldInfo& Engine::world() const { return impl_->world; }

Handle Engine::allreduce_async(std::string name, const void* input, void* output, Shape shape,
                               DataType dtype, ReduceOp op, double prescale, double postscale,
                               OpOptions options) {
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kAllreduce, std::move(name), input, output,
                                       std::move(shape), dtype));
  auto& r = entries.back().request;
  r.op = op;
  r.prescale = prescale;
  r.postscale = postscale;
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::grouped_allreduce_async(const std::vector<std::string>& names,
                                       const std::vector<const void*>& inputs,
                                       const std::vector<void*>& outputs,
                                       const std::vector<Shape>& shapes, DataType dtype,
                                       ReduceOp op, double prescale, double postscale,
                                       OpOptions options) {
  size_t n = names.size();
  if (n == 0 || inputs.size() != n || outputs.size() != n || shapes.size() != n)
    throw InvalidArgument(fmt::format(
        "grouped_allreduce: {} names, {} inputs, {} outputs and {} shapes: need the same "
        "non-zero count of each",
        names.size(), inputs.size(), outputs.size(), shapes.size()));
  std::vector<Entry> entries;
  for (size_t i = 0; i < n; ++i) {
    entries.push_back(detail::make_entry(Collective::kAllreduce, names[i], inputs[i], outputs[i],
                                         shapes[i], dtype));
    auto& r = entries.back().request;
    r.op = op;
    r.prescale = prescale;
    r.postscale = postscale;
  }
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::allgather_async(std::string name, const void* input, Shape shape, DataType dtype,
                               Allocator allocate, OpOptions options) {
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kAllgather, std::move(name), input, nullptr,
                                       std::move(shape), dtype));
  entries.back().allocate = std::move(allocate);
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::grouped_allgather_async(const std::vector<std::string>& names,
                                       const std::vector<const void*>& inputs,
                                       const std::vector<Shape>& shapes,
                                       const std::vector<DataType>& dtypes,
                                       std::vector<Allocator> allocates, OpOptions options) {
  std::vector<Entry> entries = detail::allocating_group(Collective::kAllgather, "grouped_allgather",
                                                        names, inputs, shapes, dtypes, allocates);
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::grouped_reduce_scatter_async(const std::vector<std::string>& names,
                                            const std::vector<const void*>& inputs,
                                            const std::vector<Shape>& shapes,
                                            const std::vector<DataType>& dtypes, ReduceOp op,
                                            std::vector<Allocator> allocates, OpOptions options) {
  std::vector<Entry> entries =
      detail::allocating_group(Collective::kReduceScatter, "grouped_reduce_scatter", names, inputs,
                               shapes, dtypes, allocates);
  for (Entry& e : entries) e.request.op = op;
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::broadcast_async(std::string name, void* buffer, Shape shape, DataType dtype,
                               int root, OpOptions options) {
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kBroadcast, std::move(name), buffer, buffer,
                                       std::move(shape), dtype));
  entries.back().request.root = root;
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::alltoall_async(std::string name, const void* input, Shape shape, DataType dtype,
                              std::vector<int64_t> splits, Allocator allocate, OpOptions options) {
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kAlltoall, std::move(name), input, nullptr,
                                       std::move(shape), dtype));
  entries.back().request.splits = std::move(splits);
  entries.back().allocate = std::move(allocate);
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

Handle Engine::reduce_scatter_async(std::string name, const void* input, Shape shape,
                                    DataType dtype, ReduceOp op, Allocator allocate,
                                    OpOptions options) {
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kReduceScatter, std::move(name), input, nullptr,
                                       std::move(shape), dtype));
  entries.back().request.op = op;
  entries.back().allocate = std::move(allocate);
  return impl_->submit(options.process_set, std::move(entries), std::move(options));
}

void Engine::barrier(int process_set) {
  std::vector<Entry> entries;
  entries.push_back(
      detail::make_entry(Collective::kBarrier, "barrier", nullptr, nullptr, {}, DataType::kUInt8));
  impl_->submit(process_set, std::move(entries), {}).wait();
}

int Engine::join() {
  std::vector<Entry> entries;
  entries.push_back(
      detail::make_entry(Collective::kJoin, "join", nullptr, nullptr, {}, DataType::kUInt8));
  Handle h = impl_->submit(0, std::move(entries), {});
  h.wait();
  return h.value();
}

int Engine::add_process_set(std::vector<int> ranks) {
  ranks = detail::checked_set_ranks(ranks, size());
  std::string name;
  {
    MutexLock lock(impl_->mu);
    name = fmt::format("add_process_set#{}", impl_->add_calls++);
  }
  std::vector<Entry> entries;
  entries.push_back(detail::make_entry(Collective::kAddProcessSet, std::move(name), nullptr,
                                       nullptr, {}, DataType::kUInt8));
  entries.back().request.ranks.assign(ranks.begin(), ranks.end());
  Handle h = impl_->submit(0, std::move(entries), {});
  h.wait();
  return h.value();
}

void Engine::remove_process_set(int id) {
  std::shared_ptr<ProcessSetWorker> w;
  std::string name;
  {
    MutexLock lock(impl_->mu);
    if (impl_->shut_down) throw InvalidArgument("engine: shut down; call init() again to use it");
    if (id == 0)
      throw InvalidArgument(
          "remove_process_set(0): set 0 is the global set of every rank; it cannot be removed "
          "(shutdown() ends it)");
    if (!impl_->set_ranks.count(id))
      throw InvalidArgument(fmt::format("remove_process_set({}): {}", id,
                                        impl_->removed.count(id) ? "that set was already removed"
                                                                 : "there is no such process set"));
    if (auto it = impl_->workers.find(id); it != impl_->workers.end()) w = it->second;
    name = fmt::format("remove_process_set#{}", impl_->remove_calls++);
  }
  // Every rank tells how many operations it has pending in the set, so all
  // refuse alike: a rank that went on alone would stop the set under the
  // others' operations.
  const std::vector<std::string> mine = w ? w->pending_names() : std::vector<std::string>{};
  int32_t count = static_cast<int32_t>(mine.size());
  std::vector<int32_t> counts;
  allgather_async(name, &count, {1}, DataType::kInt32, [&counts](const Shape& s, DataType) {
    counts.assign(static_cast<size_t>(num_elements(s)), 0);
    return static_cast<void*>(counts.data());
  }).wait();
  std::vector<std::string> busy;
  for (size_t r = 0; r < counts.size(); ++r)
    if (counts[r] > 0) busy.push_back(fmt::format("{} on rank {}", counts[r], r));
  if (!busy.empty())
    throw InvalidArgument(fmt::format(
        "remove_process_set({}): operations of the set have not completed ({}{}); wait for "
        "their handles on every rank before removing it",
        id, fmt::join(busy, ", "),
        mine.empty() ? "" : fmt::format("; here: '{}'", fmt::join(mine, "', '"))));
  if (w) {  // every member stops its worker; the first announcement ends the set for all
    w->request_stop();
    w->join();
  }
  MutexLock lock(impl_->mu);
  impl_->workers.erase(id);
  impl_->set_ranks.erase(id);
  impl_->removed.insert(id);
}

void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  if (rank() == 0) impl_->ctx.timeline.start(path, mark_cycles);
}

void Engine::stop_timeline() { impl_->ctx.timeline.stop(); }

size_t Engine::fusion_threshold() const { return impl_->ctx.current_threshold.load(); }

void Engine::set_fusion_threshold(size_t bytes) { impl_->ctx.requested_threshold.store(bytes); }

bool Engine::autotune_converged() const { return impl_->ctx.autotune_converged.load(); }

}  // namespace lockstep::engine
