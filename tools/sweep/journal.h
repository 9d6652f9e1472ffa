// The sweep's journal: JSON lines in RUN_DIR/journal.jsonl, one event each
// ("sweep", "trial", "start", "rung", "end"; docs/sweep.md lists the
// fields). It is the sweep's only state on disk: a sweep started again with
// the same RUN_DIR replays it, keeps every ended trial and restarts the
// interrupted ones. Each event is one write(2) with O_APPEND; a torn last
// line (a SIGKILL mid-write) is cut off when the journal is opened, so the
// next event starts on a line of its own.
//
// Not thread-safe (the sweep loop owns it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::sweep {

class Journal {
 public:
  explicit Journal(std::string path);  // repairs a torn tail

  const std::string& path() const { return path_; }
  const std::vector<nlohmann::json>& events() const { return events_; }  // as read at open
  void append(const nlohmann::json& event);

 private:
  std::string path_;
  std::vector<nlohmann::json> events_;
};

}  // namespace lockstep::sweep
