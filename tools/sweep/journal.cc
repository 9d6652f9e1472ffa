#include "tools/sweep/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {

Journal::Journal(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  const size_t whole = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (whole < text.size()) std::filesystem::resize_file(path_, whole);  // torn last line
  std::istringstream lines(text.substr(0, whole));
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    auto event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_object() || !event.contains("event"))
      throw Error(
          fmt::format("journal {} line {} is not a sweep event: {}; the file was edited "
                      "or is not a journal (use another --dir)",
                      path_, number, line.substr(0, 80)));
    events_.push_back(std::move(event));
  }
}

void Journal::append(const nlohmann::json& event) {
  const std::string text = event.dump() + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot open journal {}: {}", path_, std::strerror(errno)));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw Error(fmt::format("cannot write journal {}: {}", path_, std::strerror(saved)));
}

}  // namespace lockstep::sweep
