// A `lockstep run` worker that meets the other ranks through the rendezvous
// store: each rank counts itself in, publishes its rank, waits for everyone's
// and prints "rank R saw N ranks" on success.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/base/knobs.h"
#include "lockstep/rendezvous/store.h"

int main() {
  using namespace std::chrono_literals;
  try {
    int rank = static_cast<int>(lockstep::knob_int("LOCKSTEP_RANK"));
    int size = static_cast<int>(lockstep::knob_int("LOCKSTEP_SIZE"));
    auto store = lockstep::rendezvous::StoreClient::from_environment();
    store.add("arrived", 1);
    store.set("rank/" + std::to_string(rank), std::to_string(rank));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("rank/" + std::to_string(r));
    store.wait(keys, 30s);
    for (int r = 0; r < size; ++r)
      if (store.get(keys[r], 1s) != std::to_string(r)) return 3;
    std::printf("rank %d saw %lld ranks\n", rank, static_cast<long long>(store.add("arrived", 0)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous worker: %s\n", e.what());
    return 1;
  }
}
