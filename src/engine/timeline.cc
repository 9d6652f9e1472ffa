#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"

namespace lockstep::engine::detail {
namespace {

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk must not take the training job down
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kNegotiate: return "NEGOTIATE";
    case Phase::kWaitForData: return "WAIT_FOR_DATA";
    case Phase::kFuseCopyIn: return "FUSE_COPY_IN";
    case Phase::kCollective: return "COLLECTIVE";
    case Phase::kCopyOut: return "COPY_OUT";
    case Phase::kMarker: return "FUSED_BATCH";
    case Phase::kCycleStart: return "CYCLE_START";
  }
  return "?";
}

void Timeline::start(const std::string& path, bool mark_cycles) {
  MutexLock control(control_mu_);
  stop_locked();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InvalidArgument(
        fmt::format("timeline: cannot open '{}': {}", path, std::strerror(errno)));
  write_all(fd, "[\n");
  {
    MutexLock lock(mu_);
    fd_ = fd;
    stopping_ = false;
    dropped_ = 0;
    origin_ = Clock::now();
    rows_.clear();
  }
  writer_ = std::thread([this] { writer_loop(); });
  mark_cycles_.store(mark_cycles);
  active_.store(true);
}

void Timeline::stop() {
  MutexLock control(control_mu_);
  stop_locked();
}

void Timeline::stop_locked() {
  if (!writer_.joinable()) return;
  active_.store(false);
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
  int fd;
  uint64_t dropped;
  {
    MutexLock lock(mu_);
    fd = fd_;
    fd_ = -1;
    dropped = dropped_;
    queue_.clear();  // raced in after the writer's last drain; the file is closing
  }
  write_all(
      fd, fmt::format(R"({{"name":"timeline_end","ph":"M","pid":0,"args":{{"dropped_events":{}}}}})"
                      "\n]\n",
                      dropped));
  ::close(fd);
}

void Timeline::record(const std::string& tensor, Phase phase, Clock::time_point begin,
                      Clock::time_point end, std::string detail) {
  if (!active()) return;
  {
    MutexLock lock(mu_);
    if (stopping_ || fd_ < 0) return;
    if (queue_.size() >= kQueueCapacity) {
      ++dropped_;
      return;
    }
    queue_.push_back(Event{tensor, std::move(detail), phase, begin, end});
    if (queue_.size() != kWakeBatch) return;
  }
  cv_.notify_one();
}

void Timeline::mark_cycle(int set) {
  if (!marks_cycles()) return;
  const auto now = Clock::now();
  record({}, Phase::kCycleStart, now, now, std::to_string(set));
}

std::string Timeline::format(const Event& e) {
  auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  if (e.phase == Phase::kCycleStart)  // global scope: no tensor row (Horovod's marker)
    return fmt::format(R"({{"name":"CYCLE_START","ph":"i","s":"g","pid":0,"tid":0,"ts":{:.3f},)"
                       R"("args":{{"process_set":{}}}}},)"
                       "\n",
                       us(e.begin), e.detail);
  std::string out;
  auto [it, added] = rows_.emplace(e.tensor, static_cast<int>(rows_.size()) + 1);
  if (added)
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":0,"tid":{},"args":{{"name":{}}}}},)"
                       "\n",
                       it->second, quoted(e.tensor));
  if (e.phase == Phase::kMarker) {
    out += fmt::format(R"({{"name":"FUSED_BATCH","ph":"i","s":"p","pid":0,"tid":{},"ts":{:.3f},)"
                       R"("args":{{"batch":{}}}}},)"
                       "\n",
                       it->second, us(e.begin), quoted(e.detail));
  } else if (!e.detail.empty()) {  // COLLECTIVE: the algorithm that ran
    out += fmt::format(R"({{"name":"{}","ph":"X","pid":0,"tid":{},"ts":{:.3f},"dur":{:.3f},)"
                       R"("args":{{"algorithm":{}}}}},)"
                       "\n",
                       phase_name(e.phase), it->second, us(e.begin), us(e.end) - us(e.begin),
                       quoted(e.detail));
  } else {
    out += fmt::format(R"({{"name":"{}","ph":"X","pid":0,"tid":{},"ts":{:.3f},"dur":{:.3f}}},)"
                       "\n",
                       phase_name(e.phase), it->second, us(e.begin), us(e.end) - us(e.begin));
  }
  return out;
}

void Timeline::writer_loop() {
  std::deque<Event> batch;
  for (;;) {
    bool last = false;
    int fd;
    {
      MutexLock lock(mu_);
      const auto deadline = Clock::now() + kFlushPeriod;
      while (!stopping_ && queue_.size() < kWakeBatch)
        if (!lock.wait_until(cv_, deadline)) break;
      batch.swap(queue_);
      last = stopping_;
      fd = fd_;
    }
    std::string text;
    for (const Event& e : batch) text += format(e);
    batch.clear();
    if (!text.empty()) write_all(fd, text);  // whole lines per write: a kill leaves valid lines
    if (last) {
      MutexLock lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace lockstep::engine::detail
