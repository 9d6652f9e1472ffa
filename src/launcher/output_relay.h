// Re-emits one worker stream on the launcher's stdout or stderr, optionally
// prefixing every line with "[rank]: ". Bytes pass through unchanged (binary
// safe); with a prefix, a partial line is held until its newline, and flushed
// with a newline appended when the stream ends. Lines longer than
// kMaxLineBytes are split rather than buffered without bound. Internal.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::launcher {

class OutputRelay {
 public:
  static constexpr size_t kMaxLineBytes = 64 << 10;

  OutputRelay(int out_fd, int rank, bool prefix);
  void feed(std::string_view bytes);
  void finish();  // at end of stream

 private:
  void emit_line(std::string_view line);
  int out_fd_;
  std::string prefix_;
  bool prefixing_;
  std::string partial_;
};

// write(2) until done; drops the data if the destination is gone (EPIPE...),
// since nobody is left to read it.
void write_fully(int fd, std::string_view bytes);

}  // namespace lockstep::launcher
