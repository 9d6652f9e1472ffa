// The process-wide engine behind engine::init() / engine::shutdown().
#include "lockstep/base/error.h"
#include "lockstep/base/mutex.h"
#include "lockstep/base/terminate.h"
#include "lockstep/engine/engine.h"

namespace lockstep::engine {
namespace {

Mutex g_mu;
std::unique_ptr<Engine> g_engine LOCKSTEP_GUARDED_BY(g_mu);

void check_not_initialized() LOCKSTEP_REQUIRES(g_mu) {
  if (g_engine) throw InvalidArgument("engine::init: already initialized; call shutdown() first");
}

}  // namespace

// Checked before connecting: a second Communicator for the same job would
// collide with the running engine's.
void init() {
  {
    MutexLock lock(g_mu);
    check_not_initialized();
  }
  init(comm::Communicator::from_environment());
}

void init(const comm::WorldInfo& world) {
  {
    MutexLock lock(g_mu);
    check_not_initialized();
  }
  init(comm::Communicator::create(world));
}

void init(std::unique_ptr<comm::Communicator> comm, EngineConfig config) {
  install_terminate_handler();  // an uncaught lockstep::Error names itself and the rank
  MutexLock lock(g_mu);
  check_not_initialized();
  g_engine = std::make_unique<Engine>(std::move(comm), std::move(config));
}

bool is_initialized() {
  MutexLock lock(g_mu);
  return g_engine != nullptr;
}

void shutdown() {
  std::unique_ptr<Engine> engine;
  {
    MutexLock lock(g_mu);
    engine = std::move(g_engine);
  }
  if (engine) engine->shutdown();
}

Engine& global() {
  MutexLock lock(g_mu);
  if (!g_engine) {
    // Uncaught, this must name itself too, not end in a bare "terminate
    // called" + SIGABRT: the handler would otherwise come only with init().
    install_terminate_handler();
    throw InvalidArgument(
        "engine: not initialized; call lockstep::engine::init() (lockstep::torch::init() with "
        "the torch API) before any collective");
  }
  return *g_engine;
}

int rank() { return global().rank(); }
int size() { return global().size(); }
int local_rank() { return global().local_rank(); }
int local_size() { return global().local_size(); }
int cross_rank() { return global().cross_rank(); }
int cross_size() { return global().cross_size(); }

}  // namespace lockstep::engine
