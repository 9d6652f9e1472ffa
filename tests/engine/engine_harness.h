// Test helpers: run a body in N real processes, each with its own Engine.
#pragma once

#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/engine/engine.h"
#include "support/multiproc.h"

namespace lockstep::testing {

using engine::DataType;
using engine::Engine;
using engine::EngineConfig;
using engine::ReduceOp;
using engine::Shape;

// Options naming process set `id` (the other fields at their defaults).
inline engine::OpOptions in_set(int id) {
  engine::OpOptions o;
  o.process_set = id;
  return o;
}

// body runs in every child after the env of `options` is set; `tweak` edits
// the knob-derived config before the Engine starts.
inline std::vector<ChildResult> run_engines(int size, const std::function<void(Engine&)>& body,
                                            MultiProcOptions options = {},
                                            const std::function<void(EngineConfig&)>& tweak = {}) {
  return run_workers_raw(
      size,
      [&](const comm::WorldInfo& world) {
        EngineConfig config = EngineConfig::from_knobs();
        if (tweak) tweak(config);
        Engine engine(comm::Communicator::create(world, "shm"), config);
        body(engine);
        engine.shutdown();
      },
      options);
}

// An Allocator that stores the output in `storage`.
template <typename T>
engine::Allocator vector_allocator(std::vector<T>& storage) {
  return [&storage](const Shape& shape, DataType) -> void* {
    storage.assign(static_cast<size_t>(engine::num_elements(shape)), T{});
    return storage.data();
  };
}

// Expects `fn` to throw E whose message contains every string in `parts`.
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace lockstep::testing
