#include "torch/step_profiler.h"

#include <unistd.h>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/profile.h"

namespace lockstep::torch {
namespace detail {

std::atomic<StepProfiler*> g_step_profiler{nullptr};

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double ms_between(int64_t from, int64_t to) { return to > from ? (to - from) / 1e6 : 0.0; }

// The first autograd node of a step marks the start of backward. Many
// nodes run per step; after the first this is one atomic load.
std::atomic<int64_t> g_backward_ns{0};

std::unique_ptr<at::ObserverContext> on_backward_node(const at::RecordFunction&) {
  if (g_backward_ns.load(std::memory_order_relaxed) == 0) {
    int64_t expected = 0;
    g_backward_ns.compare_exchange_strong(expected, now_ns(), std::memory_order_relaxed);
  }
  return nullptr;
}

at::CallbackHandle g_callback = 0;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : all)
    if (c == '\0') c = ' ';
  while (!all.empty() && all.back() == ' ') all.pop_back();
  return all;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

StepProfiler::StepProfiler(std::string path, int warmup, int steps)
    : path_(std::move(path)), warmup_(warmup), steps_(steps) {
  profile_.program = command_line();
  profile_.host = host_label();
  profile_.world_size = size();
  profile_.local_size = local_size();
  profile_.intra_op_threads = at::get_num_threads();
  profile_.backend = size() > 1 ? knob_string("LOCKSTEP_BACKEND") : "";
  profile_.source = "recorded (LOCKSTEP_PROFILE)";
  profile_.warmup_steps = warmup;
  if (engine::is_initialized())
    profile_.fusion_threshold = static_cast<int64_t>(engine::global().fusion_threshold());
}

int StepProfiler::add_gradient(const void* owner, const std::string& name, int64_t bytes,
                               const std::string& dtype, bool overlap, std::vector<int64_t> shape) {
  MutexLock lock(mu_);
  const void* expected = nullptr;
  if (!owner_.compare_exchange_strong(expected, owner) && expected != owner) return -1;
  profile_.overlap = overlap;
  profile_.gradients.push_back({name, bytes, dtype, 0, std::move(shape)});
  ready_ms_.emplace_back();
  ready_ns_.push_back(0);
  return static_cast<int>(profile_.gradients.size() - 1);
}

void StepProfiler::detach(const void* owner) {
  MutexLock lock(mu_);
  if (owner_.load() != owner) return;
  owner_.store(nullptr);
  // The next optimizer has other gradients: what was recorded no longer
  // describes its steps, so recording starts over (warm-up included).
  profile_.steps.clear();
  profile_.gradients.clear();
  ready_ms_.clear();
  ready_ns_.clear();
  step_start_ns_ = sync_begin_ns_ = sync_end_ns_ = 0;
  samples_ = 0;
  seen_steps_ = 0;
}

void StepProfiler::zero_grad() {
  MutexLock lock(mu_);
  if (step_start_ns_ == 0) step_start_ns_ = now_ns();
}

void StepProfiler::gradient_ready(int id) {
  int64_t t = now_ns();
  MutexLock lock(mu_);
  if (id >= 0 && static_cast<size_t>(id) < ready_ns_.size()) ready_ns_[id] = t;
}

void StepProfiler::sync_begin() {
  int64_t t = now_ns();
  MutexLock lock(mu_);
  if (sync_begin_ns_ == 0) sync_begin_ns_ = t;
}

void StepProfiler::sync_end() {
  int64_t t = now_ns();
  MutexLock lock(mu_);
  sync_end_ns_ = t;
}

void StepProfiler::samples(int64_t n) {
  MutexLock lock(mu_);
  samples_ += n;
}

void StepProfiler::step_end() {
  const int64_t now = now_ns();
  MutexLock lock(mu_);
  if (done_) return;
  const int64_t backward = g_backward_ns.load(std::memory_order_relaxed);
  if (backward != 0 && step_start_ns_ != 0 && backward >= step_start_ns_) {
    const int64_t sync_b = sync_begin_ns_ ? sync_begin_ns_ : now;
    const int64_t sync_e = sync_end_ns_ >= sync_b ? sync_end_ns_ : sync_b;
    if (++seen_steps_ > warmup_) {
      profile_.steps.push_back({.step_ms = ms_between(step_start_ns_, now),
                                .forward_ms = ms_between(step_start_ns_, backward),
                                .backward_ms = ms_between(backward, sync_b),
                                .sync_ms = ms_between(sync_b, sync_e),
                                .optimizer_ms = ms_between(sync_e, now),
                                .samples = samples_});
      for (size_t i = 0; i < ready_ns_.size(); ++i)
        if (ready_ns_[i] >= backward) ready_ms_[i].push_back(ms_between(backward, ready_ns_[i]));
      if (static_cast<int>(profile_.steps.size()) >= steps_) finish_locked();
    }
  }
  step_start_ns_ = now;
  sync_begin_ns_ = sync_end_ns_ = 0;
  samples_ = 0;
  std::fill(ready_ns_.begin(), ready_ns_.end(), 0);
  g_backward_ns.store(0, std::memory_order_relaxed);
}

void StepProfiler::finish_locked() {
  done_ = true;
  if (g_callback) at::removeCallback(g_callback);
  g_callback = 0;
  std::vector<double> backward;
  for (const auto& s : profile_.steps) backward.push_back(s.backward_ms);
  for (size_t i = 0; i < profile_.gradients.size(); ++i) {
    // A gradient that never became ready in a recorded step (an unused
    // parameter) is zero-filled by synchronize(): ready at backward's end.
    profile_.gradients[i].ready_ms = ready_ms_[i].empty() ? median(backward) : median(ready_ms_[i]);
  }
  profile_.created = utc_now();
  try {
    profile::save_profile(path_, profile_);
    log(LogLevel::kInfo, "profile: wrote {} steps ({} gradients) to {}", profile_.steps.size(),
        profile_.gradients.size(), path_);
  } catch (const std::exception& e) {
    log(LogLevel::kError, "profile: cannot write {}: {}", path_, e.what());
  }
}

void init_step_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string path = knob_string("LOCKSTEP_PROFILE");
    if (path.empty() || rank() != 0) return;
    const int64_t warmup = knob_int("LOCKSTEP_PROFILE_WARMUP");
    const int64_t steps = knob_int("LOCKSTEP_PROFILE_STEPS");
    if (warmup < 0 || steps < 1)
      throw InvalidArgument(
          fmt::format("LOCKSTEP_PROFILE_WARMUP={} must be >= 0 and LOCKSTEP_PROFILE_STEPS={} >= 1",
                      warmup, steps));
    auto* profiler = new StepProfiler(path, static_cast<int>(warmup), static_cast<int>(steps));
    g_callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_backward_node)
                                           .scopes({at::RecordScope::BACKWARD_FUNCTION})
                                           .needsInputs(false));
    g_step_profiler.store(profiler, std::memory_order_release);
  });
}

}  // namespace detail

void profile_samples(int64_t n) {
  if (detail::StepProfiler* p = detail::step_profiler()) p->samples(n);
}

bool profiling() {
  detail::StepProfiler* p = detail::step_profiler();
  return p && p->recording();
}

}  // namespace lockstep::torch
