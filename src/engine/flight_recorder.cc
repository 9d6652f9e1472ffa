// Note [Flight recorder] in flight_recorder.h.
#include "engine/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/log.h"

namespace lockstep::engine::detail {
namespace {

constexpr size_t kSummaryRecords = 6;
constexpr const char* kFormat = "lockstep-flight-recorder";

}  // namespace

std::string error_message(std::exception_ptr error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

std::string error_kind(std::exception_ptr error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const DeadlockError&) {
    return "deadlock";
  } catch (const TimeoutError&) {
    return "timeout";
  } catch (const MismatchError&) {
    return "mismatch";
  } catch (const PeerFailure&) {
    return "peer_failure";
  } catch (const Aborted&) {
    return "aborted";
  } catch (const InvalidArgument&) {
    return "invalid_argument";
  } catch (...) {
    return "error";
  }
}

namespace {

nlohmann::json record_json(const FlightRecord& r) {
  nlohmann::json j = {{"id", r.id},
                      {"set", r.set},
                      {"seq", r.seq},
                      {"op", collective_name(r.collective)},
                      {"name", r.name},
                      {"dtype", comm::dtype_name(r.dtype)},
                      {"bytes", r.bytes},
                      {"shape", r.shape},
                      {"state", flight_state_name(r.state)},
                      {"submitted_us", r.submitted_us},
                      {"negotiated_us", r.negotiated_us},
                      {"started_us", r.started_us},
                      {"finished_us", r.finished_us}};
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.error_kind.empty()) j["error_kind"] = r.error_kind;
  return j;
}

std::string describe(const FlightRecord& r, int64_t now_us) {
  std::string seq = r.seq >= 0 ? fmt::format("#{}", r.seq) : "#?";
  int64_t since = r.finished_us ? r.finished_us : r.submitted_us;
  return fmt::format("{} {} '{}' {} B {} {}{}", seq, collective_name(r.collective), r.name, r.bytes,
                     flight_state_name(r.state), r.finished_us ? "" : "for ",
                     r.finished_us ? fmt::format("{:.1f} s ago", (now_us - since) / 1e6)
                                   : fmt::format("{:.1f} s", (now_us - since) / 1e6));
}

}  // namespace

std::string_view flight_state_name(FlightState state) {
  switch (state) {
    case FlightState::kSubmitted: return "submitted";
    case FlightState::kNegotiated: return "negotiated";
    case FlightState::kRunning: return "running";
    case FlightState::kDone: return "done";
    case FlightState::kFailed: return "failed";
  }
  return "unknown";
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string default_flight_dir(const std::string& job_id) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  std::string job = job_id.empty() ? fmt::format("pid{}", ::getpid()) : job_id;
  return fmt::format("{}/lockstep-flight-{}", base, job);
}

FlightRecorder::FlightRecorder(size_t capacity, FlightIdentity identity)
    : identity_(std::move(identity)), capacity_(capacity), ring_(capacity) {}

FlightRecord* FlightRecorder::find(uint64_t id) {
  if (id == 0 || !enabled()) return nullptr;
  FlightRecord& r = ring_[id % ring_.size()];
  return r.id == id ? &r : nullptr;
}

uint64_t FlightRecorder::submitted(int set, const Request& request) {
  if (!enabled()) return 0;
  MutexLock lock(mu_);
  uint64_t id = next_id_++;
  FlightRecord& r = ring_[id % ring_.size()];
  r = FlightRecord{};
  r.id = id;
  r.set = set;
  r.collective = request.collective;
  r.name = request.name;
  r.dtype = request.dtype;
  r.bytes = request.bytes();
  r.shape = request.shape;
  r.submitted_us = wall_clock_us();
  return id;
}

void FlightRecorder::negotiated(uint64_t id, int64_t seq) {
  MutexLock lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->seq = seq;
    r->state = FlightState::kNegotiated;
    r->negotiated_us = wall_clock_us();
  }
}

void FlightRecorder::started(uint64_t id) {
  MutexLock lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->state = FlightState::kRunning;
    r->started_us = wall_clock_us();
  }
}

void FlightRecorder::finished(uint64_t id, std::exception_ptr error) {
  if (!enabled()) return;
  std::string text = error_message(error);  // outside the lock
  std::string kind = error_kind(error);
  MutexLock lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->state = error ? FlightState::kFailed : FlightState::kDone;
    r->finished_us = wall_clock_us();
    r->error = std::move(text);
    r->error_kind = std::move(kind);
  }
}

void FlightRecorder::set_members(int set, std::vector<int> ranks) {
  MutexLock lock(mu_);
  for (auto& [id, members] : sets_)
    if (id == set) {
      members = std::move(ranks);
      return;
    }
  sets_.emplace_back(set, std::move(ranks));
}

std::vector<FlightRecord> FlightRecorder::newest(size_t n) const {
  std::vector<FlightRecord> out;
  for (const auto& r : ring_)
    if (r.id != 0) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (out.size() > n) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(n));
  return out;
}

std::string FlightRecorder::to_json(std::string_view reason) const {
  MutexLock lock(mu_);
  nlohmann::json sets = nlohmann::json::array();
  for (const auto& [id, ranks] : sets_) sets.push_back({{"id", id}, {"ranks", ranks}});
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& r : newest(ring_.size())) ops.push_back(record_json(r));
  nlohmann::json j = {{"format", kFormat},
                      {"version", 1},
                      {"rank", identity_.rank},
                      {"size", identity_.size},
                      {"job_id", identity_.job_id},
                      {"host", host_name()},
                      {"pid", ::getpid()},
                      {"reason", std::string(reason)},
                      {"dumped_us", wall_clock_us()},
                      {"capacity", ring_.size()},
                      {"recorded", next_id_ - 1},
                      {"sets", sets},
                      {"operations", ops}};
  return j.dump(1);
}

std::string FlightRecorder::summary(const std::string& path, std::string_view reason) const {
  const int64_t now = wall_clock_us();
  std::string lines;
  for (const auto& r : newest(kSummaryRecords)) lines += "\n    " + describe(r, now);
  return fmt::format(
      "flight recorder: {} (reason: {}); the last {} of {} operations:{}\n  compare every "
      "rank's dump with: lockstep doctor {}",
      path.empty() ? "dump not written" : "dumped to " + path, reason,
      std::min<uint64_t>(kSummaryRecords, next_id_ - 1), next_id_ - 1, lines, identity_.dir);
}

std::string FlightRecorder::dump(std::string_view reason, bool failure) {
  if (!enabled()) return {};
  {
    MutexLock lock(mu_);
    if (dumps_ >= kMaxDumps || dumped_reasons_.count(reason)) return {};
    ++dumps_;
    dumped_reasons_.emplace(reason);
  }
  namespace fs = std::filesystem;
  std::string path = fmt::format("{}/rank{}.json", identity_.dir, identity_.rank);
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::error_code ec;
  fs::create_directories(identity_.dir, ec);
  std::string text = to_json(reason);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    if (!out) path.clear();
  }
  if (!path.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) path.clear();
  if (path.empty()) {
    std::remove(tmp.c_str());
    log(LogLevel::kError,
        "flight recorder: cannot write a dump in {} (set LOCKSTEP_FLIGHT_DIR "
        "to a writable folder)",
        identity_.dir);
  }
  MutexLock lock(mu_);
  log(failure ? LogLevel::kError : LogLevel::kWarning, "{}", summary(path, reason));
  return path;
}

}  // namespace lockstep::engine::detail
