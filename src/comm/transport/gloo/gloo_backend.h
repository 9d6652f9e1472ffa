// Gloo transport: lockstep collectives over TCP between hosts (libgloo).
//
// Ranks rendezvous through the job's store (gloo_store.h) and connect a full
// mesh of TCP pairs on the interface LOCKSTEP_NETWORK_INTERFACE (default: the
// address of this host's name). Only Gloo's options-style API
// (gloo::AllreduceOptions, ...) and unbound buffers are used: mixing in the
// older algorithm classes on the same pairs was measured to freeze the send
// buffer at ~4.6 KB and run 40-300x slower.
//
// Failures: a peer that dies closes its sockets, so the ranks talking to it
// fail at once with PeerFailure naming it (peers on this host are identified
// by pid; elsewhere Gloo's message names the address); the failing rank then
// closes its own connections so the rest of the job learns within
// milliseconds too. A live peer that does not join fails the call after
// LOCKSTEP_TIMEOUT with TimeoutError naming the ranks that did not report in.
// After either the communicator is unusable (Aborted). The backend sets
// SIGPIPE to SIG_IGN if it is at its default, so a write to a dead peer is an
// error rather than the death of this process.
#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::gloo_transport {

// Connects the ranks of `world` under `tag`. Collective over all of them.
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag);

}  // namespace lockstep::comm::gloo_transport
