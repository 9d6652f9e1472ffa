#include "tools/sweep/trial.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {

const char* status_name(Status s) {
  switch (s) {
    case Status::kPending: return "pending";
    case Status::kRunning: return "running";
    case Status::kCompleted: return "completed";
    case Status::kStopped: return "stopped";
    case Status::kFailed: return "failed";
    case Status::kTimeout: return "timeout";
  }
  return "?";
}

Status parse_status(const std::string& name) {
  for (Status s : {Status::kCompleted, Status::kStopped, Status::kFailed, Status::kTimeout})
    if (name == status_name(s)) return s;
  throw Error(fmt::format("journal: unknown trial status '{}'", name));
}

}  // namespace lockstep::sweep
