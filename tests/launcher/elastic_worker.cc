// lockstep-test-elastic-engine-worker: an elastic job at the engine level
// (no LibTorch), for the fault-injection tests of `lockstep run --min-np`.
//
// Each step allreduces 1.0 (so every rank learns the world size), adds the
// result to a running total and commits (step, total) in memory. A rank
// whose worker id is $ELASTIC_TEST_KILL_WORKER SIGKILLs itself at global step
// $ELASTIC_TEST_KILL_STEP (several "id:step" pairs, comma-separated; step -1
// means at start-up, before joining the world). After a
// lost peer or a newer generation it re-forms: shutdown, wait for the next
// generation, init, restore the commit, take rank 0's by broadcast. At the
// end every rank checks that all agree and rank 0 prints
//   elastic-worker: done generation=G size=S steps=N total=T reformations=R
// A worker named in $ELASTIC_TEST_LINGER ("id:ms") waits that long after its
// shutdown before it exits 0, so that the others finish first. At global step
// $ELASTIC_TEST_MISMATCH every rank allreduces rank + 1 elements under one
// name: a program bug (an uncaught MismatchError), not a lost host.
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/engine/elastic.h"
#include "lockstep/engine/engine.h"

namespace en = lockstep::engine;

namespace {

struct Committed {
  double step = 0, total = 0;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The numbers that the "id:n,id:n" list in `variable` gives worker `id`.
std::vector<int> plan_for(const char* variable, const std::string& id) {
  std::vector<int> numbers;
  const char* plan = std::getenv(variable);
  if (!plan) return numbers;
  std::string text = plan;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t colon = item.find(':');
    if (colon != std::string::npos && item.substr(0, colon) == id)
      numbers.push_back(std::atoi(item.c_str() + colon + 1));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return numbers;
}

bool kill_now(const std::string& id, int step) {
  for (int at : plan_for("ELASTIC_TEST_KILL", id))
    if (at == step) return true;
  return false;
}

double allreduce_sum(double x, const char* name) {
  en::global()
      .allreduce_async(name, &x, &x, {1}, lockstep::comm::DataType::kFloat64,
                       lockstep::comm::ReduceOp::kSum)
      .wait();
  return x;
}

void broadcast(Committed& c) {
  double buf[2] = {c.step, c.total};
  en::global().broadcast_async("sync", buf, {2}, lockstep::comm::DataType::kFloat64, 0).wait();
  c = {buf[0], buf[1]};
}

// Collective: rank 0 asks the store, everyone learns the answer.
void check_for_new_generation(int generation) {
  double newer = en::rank() == 0 && en::newer_generation_published(generation) ? 1 : 0;
  if (allreduce_sum(newer, "newer") > 0) throw en::WorldChanged(generation + 1);
}

}  // namespace

int main() {
  const int steps = env_int("ELASTIC_TEST_STEPS", 40);
  const auto step_sleep = std::chrono::milliseconds(env_int("ELASTIC_TEST_STEP_MS", 50));
  const std::string id = en::worker_id();
  if (kill_now(id, -1)) ::raise(SIGKILL);  // "w2:-1": crashes at start-up
  auto world = en::wait_for_world(en::start_generation(), std::chrono::seconds(60));
  en::init(world.world);
  Committed committed;
  int reformations = 0;
  while (true) {
    try {
      broadcast(committed);  // every formation starts from rank 0's commit
      Committed live = committed;
      while (live.step < steps) {
        if (kill_now(id, static_cast<int>(live.step))) ::raise(SIGKILL);
        if (env_int("ELASTIC_TEST_MISMATCH", -1) == static_cast<int>(live.step)) {
          std::vector<double> wrong(static_cast<size_t>(en::rank() + 1), 1.0);
          en::global()
              .allreduce_async("mismatch", wrong.data(), wrong.data(),
                               {static_cast<int64_t>(wrong.size())},
                               lockstep::comm::DataType::kFloat64, lockstep::comm::ReduceOp::kSum)
              .wait();
        }
        live.total += allreduce_sum(1.0, "x");
        live.step += 1;
        committed = live;
        check_for_new_generation(world.generation);
        std::this_thread::sleep_for(step_sleep);
      }
      break;
    } catch (const en::WorldChanged& e) {
      std::fprintf(stderr, "elastic-worker %s: %s\n", id.c_str(), e.what());
    } catch (const lockstep::PeerFailure& e) {
      std::fprintf(stderr, "elastic-worker %s: lost a peer: %s\n", id.c_str(), e.what());
    } catch (const lockstep::Aborted& e) {
      std::fprintf(stderr, "elastic-worker %s: aborted: %s\n", id.c_str(), e.what());
    }
    const auto lost_at = std::chrono::steady_clock::now();
    en::shutdown();
    try {
      world = en::wait_for_world(world.generation + 1, std::chrono::seconds(60));
    } catch (const en::ElasticJobFailed& e) {
      std::fprintf(stderr, "elastic-worker %s: job failed: %s\n", id.c_str(), e.what());
      return 3;
    } catch (const en::RemovedFromWorld& e) {
      std::fprintf(stderr, "elastic-worker %s: leaving: %s\n", id.c_str(), e.what());
      return 0;
    }
    en::init(world.world);
    ++reformations;
    std::fprintf(
        stderr, "elastic-worker %s: generation %d, rank %d of %d, formed %.0f ms after the error\n",
        id.c_str(), world.generation, en::rank(), en::size(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - lost_at)
            .count());
  }
  // Everyone must agree on the result.
  const double n = en::size();
  const bool agree = allreduce_sum(committed.total, "check.total") == n * committed.total;
  if (en::rank() == 0)
    std::printf(
        "elastic-worker: done generation=%d size=%d steps=%.0f total=%.0f "
        "reformations=%d agree=%d\n",
        world.generation, en::size(), committed.step, committed.total, reformations, agree ? 1 : 0);
  std::fflush(stdout);
  en::shutdown();
  for (int ms : plan_for("ELASTIC_TEST_LINGER", id))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return agree ? 0 : 4;
}
