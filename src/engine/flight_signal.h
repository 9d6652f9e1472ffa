// Creating the engine's FlightRecorder and dumping every live one on SIGUSR1.
//
// SIGUSR1's handler only writes a byte to a pipe (async-signal-safe); a
// process-wide thread reads it and dumps each registered recorder. The
// handler is installed by the first engine with a recorder, and only when
// SIGUSR1 still has its default action: a program's own handler wins (logged).
// Recorders are held weakly, so an engine that shut down is never dumped.
//
// Thread-safety: make_flight_recorder may be called from any thread.
#pragma once

#include <memory>

#include "engine/flight_recorder.h"
#include "lockstep/comm/world.h"
#include "lockstep/engine/engine.h"

namespace lockstep::engine::detail {

// A recorder per `config` (disabled when config.flight_recorder is 0),
// registered for SIGUSR1 dumps.
std::shared_ptr<FlightRecorder> make_flight_recorder(const EngineConfig& config,
                                                     const comm::WorldInfo& world);

}  // namespace lockstep::engine::detail
