// Watches a worker's stderr for the line lockstep's terminate handler prints
// (lockstep/base/terminate.h), so the launcher can say how a worker failed
// ("failed with MismatchError: ...") instead of only its exit code. Internal.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::launcher {

class FailureNoteScanner {
 public:
  // Longer lines are not notes; their bytes are skipped, never buffered.
  static constexpr size_t kMaxLineBytes = 4096;

  void feed(std::string_view bytes);
  // "MismatchError: ..." from the last such line seen; empty if none.
  const std::string& note() const { return note_; }

 private:
  void end_line();
  std::string line_;
  bool overlong_ = false;
  std::string note_;
};

}  // namespace lockstep::launcher
