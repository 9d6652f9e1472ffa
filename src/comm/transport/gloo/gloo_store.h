// The key-value store Gloo rendezvouses through.
//
// By default it is the job's authenticated rendezvous store (`lockstep run`
// sets LOCKSTEP_RENDEZVOUS and LOCKSTEP_SECRET; see
// include/lockstep/rendezvous/store.h). LOCKSTEP_GLOO_FILE_STORE=<dir> uses
// a directory every rank can see instead (Gloo's FileStore: tests, shared
// file systems). Keys are prefixed with the job id and the communicator tag,
// so the world and every sub-communicator rendezvous independently.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <gloo/rendezvous/store.h>

#include "lockstep/comm/world.h"

namespace lockstep::comm::gloo_transport {

// The store for `world` with keys under "<job_id>/<tag>/". Throws
// InvalidArgument when neither a rendezvous endpoint nor a file store is
// configured, naming both.
std::unique_ptr<::gloo::rendezvous::Store> make_store(const WorldInfo& world,
                                                      const std::string& tag,
                                                      std::chrono::milliseconds timeout);

}  // namespace lockstep::comm::gloo_transport
