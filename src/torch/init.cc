// lockstep::torch::init() and the world it starts: the engine (or the
// elastic world from the launcher's store), this worker's CPU placement and,
// for CUDA tensors, the device communicator. Apart from collectives.cc so
// that the collectives do not depend on the elastic layer that init() starts.
#include "lockstep/torch/collectives.h"

#include <map>
#include <string>

#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/base/mutex.h"
#include "lockstep/base/terminate.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/elastic.h"
#include "lockstep/torch/placement.h"

namespace lockstep::torch {
namespace {

// The decision, once per process (Note [Which way a CUDA tensor travels]).
void start_device_communicator(const Placement& placed) {
  engine::Engine& e = engine::global();
  if (e.has_device_communicator()) return;
  const std::string knob = knob_string("LOCKSTEP_DEVICE_BACKEND");
  const DeviceBackend backend =
      choose_device_backend({.knob = knob,
                             .nccl_built = comm::Communicator::has_backend("nccl"),
                             .cuda = placed.device == DeviceKind::kCuda,
                             .local_size = e.local_size(),
                             .visible_gpus = placed.visible_devices,
                             .elastic = engine::elastic_enabled()});
  if (backend != DeviceBackend::kNccl) return;
  // One rank moves nothing: NCCL's start-up only when asked for by name.
  if (e.size() == 1 && knob != "nccl") return;
  e.set_device_communicator(comm::Communicator::create(e.world(), "nccl"));
  log(LogLevel::kInfo, "CUDA tensors travel over NCCL on cuda:{}", placed.device_index);
}

}  // namespace

void init() {
  install_terminate_handler();  // also before an elastic world forms
  tune_malloc();
  if (!engine::is_initialized()) {
    // Elastic workers take their world from the launcher's store, not the environment.
    if (engine::elastic_enabled()) {
      init_elastic_world();
    } else {
      bind_before_engine();  // first touch of the shm segment on this rank's node
      engine::init();
    }
  }
  const Placement placed = place_this_worker(engine::local_rank(), engine::local_size());
  start_device_communicator(placed);
}

namespace {
Mutex hooks_mutex;
uint64_t next_hook LOCKSTEP_GUARDED_BY(hooks_mutex) = 1;
std::map<uint64_t, std::function<void()>> hooks
    LOCKSTEP_GUARDED_BY(hooks_mutex);  // by id: added order
}  // namespace

uint64_t add_shutdown_hook(std::function<void()> hook) {
  MutexLock lock(hooks_mutex);
  const uint64_t id = next_hook++;
  hooks.emplace(id, std::move(hook));
  return id;
}

void remove_shutdown_hook(uint64_t id) {
  MutexLock lock(hooks_mutex);
  hooks.erase(id);
}

void shutdown() {
  if (!engine::is_initialized()) return;
  {
    MutexLock lock(hooks_mutex);
    for (auto& [id, hook] : hooks) {
      try {
        hook();
      } catch (const std::exception& e) {  // the engine still stops; the hook's owner reports
        log(LogLevel::kWarning, "shutdown: a shutdown hook failed: {}", e.what());
      }
    }
  }
  engine::shutdown();
}

bool is_initialized() { return engine::is_initialized(); }
int rank() { return engine::is_initialized() ? engine::rank() : 0; }
int size() { return engine::is_initialized() ? engine::size() : 1; }
int local_rank() { return engine::is_initialized() ? engine::local_rank() : 0; }
int local_size() { return engine::is_initialized() ? engine::local_size() : 1; }
int cross_rank() { return engine::is_initialized() ? engine::cross_rank() : 0; }
int cross_size() { return engine::is_initialized() ? engine::cross_size() : 1; }

}  // namespace lockstep::torch
