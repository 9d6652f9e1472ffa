// A `lockstep run` worker that starts the engine (which installs the
// terminate handler) and lets an exception escape main on rank 1:
//   lockstep-test-uncaught-worker lockstep|std|before-init
// (before-init: a collective before engine::init(), on every rank)
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "before-init") == 0) {
    // A collective before init(): the user forgot it.
    float x = 1;
    lockstep::engine::global().allreduce_async("x", &x, &x, {1},
                                               lockstep::engine::DataType::kFloat32);
    return 0;
  }
  lockstep::engine::init();
  if (lockstep::engine::rank() == 1) {
    if (argc > 1 && std::strcmp(argv[1], "std") == 0) throw std::out_of_range("index 7 of 3");
    throw lockstep::MismatchError("allreduce 'w': rank 0 sent 3 floats, rank 1 sent 4");
  }
  std::this_thread::sleep_for(std::chrono::seconds(30));  // stopped by the launcher
  return 0;
}
