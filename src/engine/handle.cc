#include <fmt/format.h>

#include "engine/op_state.h"
#include "lockstep/base/error.h"

namespace lockstep::engine {
namespace detail {

void OpState::complete_one(std::exception_ptr e) {
  Callback callback;
  std::exception_ptr final_error;
  std::vector<std::shared_ptr<void>> released;
  {
    MutexLock lock(mu);
    if (done || remaining == 0) return;
    if (e && !error) error = e;
    if (--remaining > 0) return;
    final_error = error;
    callback = std::move(on_done);
    retired = true;
    released.swap(retained);
  }
  // The callback runs before waiters wake, so a returned wait() implies it ran;
  // so is what a dropped owner retained released (a name it held is free again).
  if (callback) callback(final_error);
  released.clear();
  {
    MutexLock lock(mu);
    done = true;
  }
  cv.notify_all();
}

}  // namespace detail

const detail::OpState& Handle::state() const {
  if (!state_) throw InvalidArgument("engine: this Handle is empty (default-constructed)");
  return *state_;
}

bool Handle::poll() const {
  const auto& s = state();
  MutexLock lock(s.mu);
  return s.done;
}

void Handle::wait() const {
  const auto& s = state();
  detail::WaitScope waiting(s.waits.get());
  MutexLock lock(s.mu);
  while (!s.done) lock.wait(s.cv);
  if (s.error) std::rethrow_exception(s.error);
}

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  const auto& s = state();
  detail::WaitScope waiting(s.waits.get());
  const auto deadline = detail::Clock::now() + timeout;
  MutexLock lock(s.mu);
  while (!s.done)
    if (!lock.wait_until(s.cv, deadline) && !s.done) return false;
  if (s.error) std::rethrow_exception(s.error);
  return true;
}

void Handle::retain_until_done(std::shared_ptr<void> resources) const {
  const auto& s = state();
  MutexLock lock(s.mu);
  if (!s.retired) s.retained.push_back(std::move(resources));
  // else: released here, once the lock is gone (resources' destructor runs last)
}

const Shape& Handle::output_shape() const { return state().output_shape; }
const std::vector<int64_t>& Handle::received_splits() const { return state().received_splits; }
int Handle::value() const { return state().value; }

}  // namespace lockstep::engine
