// `lockstep doctor`: merges every rank's flight-recorder dump (Note [Flight
// recorder] in src/engine/flight_recorder.h) and says which rank diverged or
// stalled first. Pure functions over parsed dumps, so tests can feed
// synthetic ones; the command (doctor_cmd.cc) only loads and prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::doctor {

struct Operation {
  uint64_t id = 0;
  int set = 0;
  int64_t seq = -1;  // negotiated position in the set; -1: not negotiated
  std::string op, name, dtype, state, error, error_kind;
  uint64_t bytes = 0;
  int64_t submitted_us = 0, negotiated_us = 0, started_us = 0, finished_us = 0;
  bool pending() const { return state == "submitted"; }  // not yet agreed by every rank
  bool finished() const { return state == "done" || state == "failed"; }
};

struct RankDump {
  int rank = -1;
  int size = 0;
  std::string job_id, host, reason, file;
  int64_t dumped_us = 0;
  std::vector<Operation> operations;  // oldest first
  int64_t last_activity_us() const;   // newest submission or completion
};

// Every `rank*.json` flight-recorder dump in `dir`. Throws lockstep::Error
// naming the folder when it holds none, or a file that is not a dump.
std::vector<RankDump> load_dumps(const std::string& dir);
RankDump parse_dump(const std::string& json_text, const std::string& file);

enum class Verdict { kNone, kDied, kDiverged, kStalled, kMismatch, kFailed };

struct Diagnosis {
  Verdict verdict = Verdict::kNone;
  std::vector<int> culprits;         // the rank(s) it names; empty when it cannot tell
  std::string summary;               // one line: "rank 2 diverged first: ..."
  std::vector<std::string> details;  // supporting findings, most important first
};

Diagnosis diagnose(const std::vector<RankDump>& dumps);

// The human report: dumps found, failures in time order, per set the last
// negotiated operations side by side, pending operations per rank, then the
// diagnosis.
std::string report(const std::vector<RankDump>& dumps, const Diagnosis& diagnosis);
std::string verdict_name(Verdict verdict);

}  // namespace lockstep::doctor
