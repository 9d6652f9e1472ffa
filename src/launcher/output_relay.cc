#include "launcher/output_relay.h"

#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace lockstep::launcher {

void write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0)
      bytes.remove_prefix(static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR)
      continue;
    else
      return;
  }
}

OutputRelay::OutputRelay(int out_fd, int rank, bool prefix)
    : out_fd_(out_fd), prefix_(fmt::format("[{}]: ", rank)), prefixing_(prefix) {}

void OutputRelay::emit_line(std::string_view line) {
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  write_fully(out_fd_, out);
}

void OutputRelay::feed(std::string_view bytes) {
  if (!prefixing_) {
    write_fully(out_fd_, bytes);
    return;
  }
  partial_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    emit_line(std::string_view(partial_).substr(start, nl - start));
  partial_.erase(0, start);
  while (partial_.size() >= kMaxLineBytes) {
    emit_line(std::string_view(partial_).substr(0, kMaxLineBytes));
    partial_.erase(0, kMaxLineBytes);
  }
}

void OutputRelay::finish() {
  if (!partial_.empty()) emit_line(partial_);
  partial_.clear();
}

}  // namespace lockstep::launcher
