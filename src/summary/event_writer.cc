// Field numbers: tensorflow/core/util/event.proto (Event).
#include "lockstep/summary/event_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/data/record_io.h"
#include "summary/wire.h"

namespace lockstep::summary {
namespace {

constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
constexpr const char* kFileVersionString = "brain.Event:2";

std::string event_header(double wall_time) {
  std::string e;
  wire::field_double(e, kWallTime, wall_time);
  wire::field_bytes(e, kFileVersion, kFileVersionString);
  return e;
}

}  // namespace

std::string event_file_name(double wall_time, const std::string& suffix) {
  return fmt::format("events.out.tfevents.{}.{}.{}{}", static_cast<int64_t>(wall_time), host_name(),
                     ::getpid(), suffix.empty() ? "" : "." + suffix);
}

double EventWriter::now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& dir, const std::string& suffix) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("TensorBoard events: cannot create {}: {}", dir, ec.message()));
  const double t = now();
  path_ = (std::filesystem::path(dir) / event_file_name(t, suffix)).string();
  // O_EXCL: two writers never share a file (same second, host, pid, suffix).
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(
        fmt::format("TensorBoard events: cannot create {}: {}", path_, std::strerror(errno)));
  append_event(event_header(t));
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

EventWriter::EventWriter(EventWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

EventWriter& EventWriter::operator=(EventWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void EventWriter::write(int64_t step, const Summary& summary, double wall_time) {
  if (fd_ < 0) throw Error("TensorBoard events: write on a moved-from EventWriter");
  std::string e;
  wire::field_double(e, kWallTime, wall_time < 0 ? now() : wall_time);
  if (step != 0)
    wire::field_varint(e, kStep, static_cast<uint64_t>(step));  // int64: two's complement
  wire::field_bytes(e, kSummary, summary.bytes());
  append_event(e);
}

void EventWriter::append_event(const std::string& event) {
  std::string frame;
  data::append_frame(frame, event);
  // The frame reads back as the event (TFRecord framing: lengths and CRCs).
  LOCKSTEP_DCHECK(
      data::parse_frame({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()}).payload ==
          event,
      "TensorBoard events: a frame of {} bytes reads back as its event", frame.size());
  const ssize_t n = ::write(fd_, frame.data(), frame.size());
  if (n != static_cast<ssize_t>(frame.size()))
    throw Error(fmt::format("TensorBoard events: short write to {}: {}", path_,
                            n < 0 ? std::strerror(errno) : "disk full?"));
}

}  // namespace lockstep::summary
