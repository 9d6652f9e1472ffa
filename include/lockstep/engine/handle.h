// Handle: the caller's view of one asynchronous engine operation.
//
// Thread-safety: every method may be called from any thread, concurrently.
// Copies share the same operation. A default-constructed Handle is empty and
// every accessor throws InvalidArgument.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lockstep/engine/types.h"

namespace lockstep::engine {

namespace detail {
struct OpState;
}

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // True once the operation finished, successfully or not. Never blocks.
  bool poll() const;
  // Blocks until the operation finishes; rethrows its error (a lockstep::Error
  // subclass: MismatchError, PeerFailure, TimeoutError, Aborted...).
  void wait() const;
  // Like wait() but gives up after `timeout`; returns whether it finished.
  bool wait_for(std::chrono::milliseconds timeout) const;

  // Results, valid after a successful wait():
  // the output's shape (allgather, alltoall, reduce_scatter; the input shape otherwise),
  const Shape& output_shape() const;
  // alltoall: how many first-dimension rows came from each rank,
  const std::vector<int64_t>& received_splits() const;
  // join: the last rank to join; add_process_set: the new set's id.
  int value() const;

  // Keeps `resources` (memory the operation reads or writes, names it holds)
  // alive until the operation has finished, then releases them on the thread
  // that completes it, before any waiter wakes; at once when it already
  // finished. For an owner that goes away without waiting (a dropped
  // lockstep::torch::TensorHandle): the engine holds only raw pointers.
  void retain_until_done(std::shared_ptr<void> resources) const;

 private:
  const detail::OpState& state() const;
  std::shared_ptr<detail::OpState> state_;
};

}  // namespace lockstep::engine
