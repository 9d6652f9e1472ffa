// One worker process as the supervisor tracks it (its output streams, where
// and as which rank it runs), shared by the supervisor's process handling
// and its elastic half. Internal; plain data, owned by the Supervisor.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/failure_note.h"
#include "launcher/hosts.h"
#include "launcher/output_relay.h"

namespace lockstep::launcher {

struct Stream {
  int fd = -1;
  OutputRelay relay;
  bool watch_failures = false;  // stderr: the terminate handler's line
  FailureNoteScanner failures;
};

struct Worker {
  int index = 0;  // stable: output prefix, elastic worker id "w<index>"
  int rank = 0;   // in the current generation (elastic jobs re-rank survivors)
  Placement where;
  pid_t pid = -1;
  bool running = false;
  bool started = true;    // remote: checked in with the store
  bool removing = false;  // elastic: left out by discovery; its exit is not a failure
  int wait_status = 0;
  int launch_fd = -1;           // remote: write end of the shim's stdin, open while it runs
  std::vector<Stream> streams;  // stdout, stderr
};

// Only multi-host jobs name hosts in messages.
inline std::string rank_label(const Worker& w, bool multi_host) {
  return multi_host ? fmt::format("rank {} on host {}", w.rank, w.where.host)
                    : fmt::format("rank {}", w.rank);
}

// The exit code a failed worker passes on: its own, or 128 + the signal.
inline int exit_code_of(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

}  // namespace lockstep::launcher
