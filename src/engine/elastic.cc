#include "lockstep/engine/elastic.h"

#include <fmt/format.h>

#include <optional>
#include <thread>

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

ElasticWorld wait_for_world(int min_generation, std::chrono::milliseconds timeout) {
  const std::string id = worker_id();
  if (id.empty())
    throw InvalidArgument("elastic: LOCKSTEP_WORKER_ID is not set; start elastic jobs with "
                          "lockstep run --min-np/--max-np");
  const std::string failed = elastic_keys::kFailed;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (exists(failed)) throw ElasticJobFailed(store().get(failed, std::chrono::seconds(5)));
    const std::string latest = elastic_keys::kLatest;
    if (exists(latest)) {
      const int g = rendezvous::elastic::parse_generation(store().get(latest, std::chrono::seconds(5)));
      if (g >= min_generation) {
        const std::string key = elastic_keys::member_key(g, id);
        if (!exists(key))
          throw ElasticJobFailed(fmt::format(
              "elastic: worker {} is not a member of generation {}", id, g));
        Assignment a = Assignment::decode(store().get(key, std::chrono::seconds(5)));
        ElasticWorld out;
        out.generation = g;
        out.world = comm::WorldInfo::from_environment();
        out.world.rank = a.rank;
        out.world.size = a.size;
        out.world.local_rank = a.local_rank;
        out.world.local_size = a.local_size;
        out.world.cross_rank = a.cross_rank;
        out.world.cross_size = a.cross_size;
        out.world.job_id = fmt::format("{}-g{}", knob_string("LOCKSTEP_JOB_ID"), g);
        out.world.validate();
        return out;
      }
    }
    if (Clock::now() >= deadline)
      throw TimeoutError(fmt::format(
          "elastic: worker {} waited {} s for generation {} of the world; is the launcher alive?",
          id, std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
          min_generation));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool newer_generation_published(int generation) {
  const std::string latest = elastic_keys::kLatest;
  if (!exists(latest)) return false;
  return rendezvous::elastic::parse_generation(store().get(latest, std::chrono::seconds(5))) > generation;
}

}  // namespace lockstep::engine
