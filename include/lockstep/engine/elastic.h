// Elastic mode, worker side: how a worker learns which world it belongs to
// while `lockstep run --min-np A --max-np B` re-forms the job around lost or
// added workers (docs/elastic.md).
//
// The launcher publishes every generation of the world in the job's
// authenticated rendezvous store, and nothing else: workers read only
// integers and fixed-format text from it (keys in elastic_keys below).
// Generation g's shared-memory segments are named after "<job id>-g<g>", so
// a re-formed world never touches the segments of the broken one.
//
// Identity: LOCKSTEP_WORKER_ID (stable for the life of the process) and
// LOCKSTEP_ELASTIC_GENERATION (the generation the process was started into),
// both set by the launcher with LOCKSTEP_ELASTIC=1.
//
// Note [Elastic generations]
// A generation is one membership of the world. The protocol keeps every
// worker of a generation agreeing on it without a coordinator:
//   1. The launcher (src/launcher/elastic.cc) writes one key per member,
//      elastic/gen/<g>/<worker id> = its Assignment, and only then
//      elastic/latest = g, so a worker that sees latest = g finds every
//      member key of g.
//   2. A worker (wait_for_world) reads latest >= the generation it needs;
//      no key for itself means RemovedFromWorld. It writes
//      elastic/gen/<g>/ready/<rank> and waits until all `size` ready keys
//      of g exist before any transport attaches, so a member that died at
//      start-up never leaves the others blocked in an attach; if latest
//      moves on meanwhile, it joins the newer generation instead.
//   3. Each generation's shared memory is named "<job id>-g<g>": a re-formed
//      world never touches the segments of the broken one.
//   4. Joins happen at commits: rank 0 asks newer_generation_published()
//      inside ElasticState::commit() and broadcasts the answer, so every
//      rank throws WorldChanged at the same commit, after the snapshot.
//      Failures (PeerFailure/Aborted) leave at once; either way run_elastic
//      waits for generation g + 1, restores the last commit (not after
//      WorldChanged: it was just taken) and syncs from rank 0
//      (src/torch/elastic.cc).
//   5. elastic/failed = reason, written when the launcher gives up, turns
//      every wait into ElasticJobFailed.
#pragma once

#include <chrono>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/comm/world.h"
#include "lockstep/rendezvous/elastic_protocol.h"

namespace lockstep::engine {

// Raised on every rank, at the same commit point, when the launcher has
// published a newer generation (workers joining). Not an error: the elastic
// run loop re-forms the world and goes on.
class WorldChanged : public Error {
 public:
  explicit WorldChanged(int generation)
      : Error("the elastic world changed (generation " + std::to_string(generation) + ")"),
        generation_(generation) {}
  int generation() const { return generation_; }

 private:
  int generation_;
};

// The launcher left this worker out of the newest generation (its host is no
// longer offered by the discovery script). Not a failure: the launcher does
// not count this worker's exit; the program should just end.
class RemovedFromWorld : public Error {
 public:
  using Error::Error;
};

// The launcher gave up (fewer than --min-np workers left, --reset-limit
// exceeded, ...); what() is the launcher's message. Not recoverable.
class ElasticJobFailed : public Error {
 public:
  using Error::Error;
};

// The store's keys and the assignment format (shared with the launcher).
namespace elastic_keys {
inline constexpr const char* kLatest = rendezvous::elastic::kLatestKey;
inline constexpr const char* kFailed = rendezvous::elastic::kFailedKey;
using rendezvous::elastic::member_key;
}  // namespace elastic_keys
using rendezvous::elastic::Assignment;

bool elastic_enabled();   // LOCKSTEP_ELASTIC=1
std::string worker_id();  // LOCKSTEP_WORKER_ID
int start_generation();   // LOCKSTEP_ELASTIC_GENERATION

struct ElasticWorld {
  comm::WorldInfo world;
  int generation = 0;
};

// Blocks until the launcher has published a generation >= min_generation,
// and returns this worker's world in the newest one. Polls the store every
// 20 ms. Throws ElasticJobFailed with the launcher's reason when it stops the
// job, RemovedFromWorld when this worker is not a member of that generation,
// TimeoutError after `timeout`.
ElasticWorld wait_for_world(int min_generation, std::chrono::milliseconds timeout);

// Whether the launcher has published a generation newer than `generation`
// (one store round trip; call it on one rank and broadcast the answer).
bool newer_generation_published(int generation);

}  // namespace lockstep::engine
