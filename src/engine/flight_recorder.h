// FlightRecorder: this rank's last N engine operations, dumped to a file when
// something goes wrong, so `lockstep doctor DIR` can line up every rank's
// view and say which rank diverged or stalled first (docs/engine.md,
// "Flight recorder").
//
// Note [Flight recorder]
// ~~~~~~~~~~~~~~~~~~~~~~
// One ring of `capacity` records per process, shared by every process-set
// worker. A record follows one operation through its life:
//   submitted (local id, name, collective, dtype, bytes, shape)
//   -> negotiated (its sequence number in the set's agreed order; identical
//      on every rank, so the doctor can align ranks by it)
//   -> running -> done | failed (with the error text).
// Timestamps are wall-clock microseconds, comparable across the ranks of one
// host (roughly across hosts). The ring keeps the newest records; an update
// for a record already overwritten is dropped.
//
// Dumps (`<dir>/rank<R>.json`, written to a temporary file and renamed) are
// taken on every failure the engine sees (a dead peer, a transport timeout,
// an abort by another rank, a mismatch, a stall timeout, a deadlock; in an
// elastic job not a dead peer or abort, see worker.cc) and on SIGUSR1; each also logs a short
// summary naming the file. At most kMaxDumps per process, and never twice for the same reason.
//
// Cost: one uncontended mutex per state change (four per operation) and a
// few dozen bytes per record; nothing is written until a dump.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "lockstep/base/mutex.h"

namespace lockstep::engine::detail {

enum class FlightState : uint8_t { kSubmitted, kNegotiated, kRunning, kDone, kFailed };
std::string_view flight_state_name(FlightState state);

struct FlightRecord {
  uint64_t id = 0;   // this rank's submission counter (0: empty slot)
  int set = 0;       // process set id
  int64_t seq = -1;  // position in the set's negotiated order; -1 before
  Collective collective = Collective::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  uint64_t bytes = 0;
  Shape shape;
  FlightState state = FlightState::kSubmitted;
  int64_t submitted_us = 0, negotiated_us = 0, started_us = 0, finished_us = 0;
  std::string error;
  std::string error_kind;  // "mismatch", "deadlock", "timeout", "peer_failure", ...
};

struct FlightIdentity {
  int rank = 0;
  int size = 1;
  std::string job_id;
  std::string dir;  // where dumps go
};

class FlightRecorder {
 public:
  static constexpr int kMaxDumps = 16;

  // capacity 0 disables recording (every call is then a no-op).
  FlightRecorder(size_t capacity, FlightIdentity identity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return capacity_ > 0; }
  // Returns the record id to pass to the calls below (0 when disabled).
  uint64_t submitted(int set, const Request& request);
  void negotiated(uint64_t id, int64_t seq);
  void started(uint64_t id);
  void finished(uint64_t id, std::exception_ptr error);
  // The members (job ranks) of a set, for the dump.
  void set_members(int set, std::vector<int> ranks);

  // Writes the dump and logs a summary (an error for a failure, a warning
  // otherwise); returns its path, or "" when disabled, already dumped for
  // this reason, over kMaxDumps, or unwritable (logged).
  std::string dump(std::string_view reason, bool failure = true);
  // The dump's JSON text (tests, and dump()).
  std::string to_json(std::string_view reason) const;
  const FlightIdentity& identity() const { return identity_; }

 private:
  FlightRecord* find(uint64_t id) LOCKSTEP_REQUIRES(mu_);
  std::vector<FlightRecord> newest(size_t n) const LOCKSTEP_REQUIRES(mu_);  // oldest first
  std::string summary(const std::string& path, std::string_view reason) const
      LOCKSTEP_REQUIRES(mu_);

  const FlightIdentity identity_;
  const size_t capacity_;  // ring_.size()
  mutable Mutex mu_;
  std::vector<FlightRecord> ring_ LOCKSTEP_GUARDED_BY(mu_);
  uint64_t next_id_ LOCKSTEP_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<int, std::vector<int>>> sets_ LOCKSTEP_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> dumped_reasons_ LOCKSTEP_GUARDED_BY(mu_);
  int dumps_ LOCKSTEP_GUARDED_BY(mu_) = 0;
};

// The dump folder when LOCKSTEP_FLIGHT_DIR is empty:
// $TMPDIR (or /tmp)/lockstep-flight-<job id>.
std::string default_flight_dir(const std::string& job_id);

int64_t wall_clock_us();
// what() of the exception, for records and dump reasons.
std::string error_message(std::exception_ptr error);
// Its lockstep error type in words: "mismatch", "deadlock", "timeout",
// "peer_failure", "aborted", "invalid_argument" or "error".
std::string error_kind(std::exception_ptr error);

}  // namespace lockstep::engine::detail
