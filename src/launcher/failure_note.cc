#include "launcher/failure_note.h"

#include "lockstep/base/terminate.h"

namespace lockstep::launcher {

void FailureNoteScanner::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n') {
      end_line();
    } else if (line_.size() < kMaxLineBytes) {
      line_.push_back(c);
    } else {
      overlong_ = true;
    }
  }
}

void FailureNoteScanner::end_line() {
  if (!overlong_)
    if (std::string summary = uncaught_error_summary(line_); !summary.empty()) note_ = summary;
  line_.clear();
  overlong_ = false;
}

}  // namespace lockstep::launcher
