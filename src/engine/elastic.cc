#include "lockstep/engine/elastic.h"

#include <fmt/format.h>

#include <optional>
#include <vector>
#include <thread>

#include "lockstep/base/check.h"
#include "lockstep/base/knobs.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::engine {
namespace {

using Clock = std::chrono::steady_clock;

rendezvous::StoreClient& store() {
  // One connection per thread: StoreClient is not thread-safe.
  thread_local std::optional<rendezvous::StoreClient> client;
  if (!client) client.emplace(rendezvous::StoreClient::from_environment());
  return *client;
}

bool exists(const std::string& key) { return store().check(std::span<const std::string>(&key, 1)); }

}  // namespace

bool elastic_enabled() { return knob_int("LOCKSTEP_ELASTIC") != 0; }
std::string worker_id() { return knob_string("LOCKSTEP_WORKER_ID"); }
int start_generation() { return static_cast<int>(knob_int("LOCKSTEP_ELASTIC_GENERATION")); }

namespace {

void throw_if_failed() {
  const std::string failed = elastic_keys::kFailed;
  if (exists(failed)) throw ElasticJobFailed(store().get(failed, std::chrono::seconds(5)));
}

std::optional<int> latest_generation() {
  const std::string latest = elastic_keys::kLatest;
  if (!exists(latest)) return std::nullopt;
  return rendezvous::elastic::parse_generation(store().get(latest, std::chrono::seconds(5)));
}

std::string ready_key(int generation, int rank) {
  return fmt::format("elastic/gen/{}/ready/{}", generation, rank);
}

bool all_ready(int generation, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(ready_key(generation, r));
  return store().check(keys);
}

ElasticWorld world_of(int generation, const Assignment& a) {
  ElasticWorld out;
  out.generation = generation;
  out.world = comm::WorldInfo::from_environment();
  out.world.rank = a.rank;
  out.world.size = a.size;
  out.world.local_rank = a.local_rank;
  out.world.local_size = a.local_size;
  out.world.cross_rank = a.cross_rank;
  out.world.cross_size = a.cross_size;
  out.world.job_id = fmt::format("{}-g{}", knob_string("LOCKSTEP_JOB_ID"), generation);
  out.world.validate();
  return out;
}

}  // namespace

// Members announce themselves in the store before any starts the engine: a
// member that dies first (a new worker crashing at start-up) never blocks
// the others in the transport's attach, which only a timeout would end;
// the launcher publishes the next generation and the waiters move to it.
ElasticWorld wait_for_world(int min_generation, std::chrono::milliseconds timeout) {
  const std::string id = worker_id();
  if (id.empty())
    throw InvalidArgument(
        "elastic: LOCKSTEP_WORKER_ID is not set; start elastic jobs with "
        "lockstep run --min-np/--max-np");
  const auto deadline = Clock::now() + timeout;
  int joining = -1;
  Assignment assignment;
  for (;;) {
    throw_if_failed();
    auto latest = latest_generation();
    // The launcher only ever publishes a higher generation (launcher/elastic.cc).
    LOCKSTEP_DCHECK(!latest || *latest >= joining,
                    "elastic: the newest generation went back from {} to {}", joining, *latest);
    if (latest && *latest >= min_generation && *latest != joining) {
      const std::string key = elastic_keys::member_key(*latest, id);
      if (!exists(key))
        throw RemovedFromWorld(fmt::format(
            "elastic: worker {} is not a member of generation {}: the launcher removed it from "
            "the job (its host is no longer offered by the discovery script)",
            id, *latest));
      assignment = Assignment::decode(store().get(key, std::chrono::seconds(5)));
      joining = *latest;
      store().set(ready_key(joining, assignment.rank), id);
    }
    if (joining >= 0 && all_ready(joining, assignment.size)) {
      LOCKSTEP_DCHECK_LE(min_generation, joining, "elastic: joined a generation older than asked");
      return world_of(joining, assignment);
    }
    if (Clock::now() >= deadline)
      throw TimeoutError(fmt::format(
          "elastic: worker {} waited {} s for {} of the world; is the launcher alive?", id,
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
          joining < 0 ? fmt::format("generation {}", min_generation)
                      : fmt::format("every member of generation {} to arrive", joining)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool newer_generation_published(int generation) {
  auto latest = latest_generation();
  return latest && *latest > generation;
}

}  // namespace lockstep::engine
