// EventWriter: a TensorBoard event file (`tensorboard --logdir DIR` reads
// it). The file is DIR/events.out.tfevents.<unix seconds>.<host>.<pid>[.suffix],
// a sequence of TFRecord frames (length, masked CRC-32C, payload, masked
// CRC-32C: lockstep/data/record_io.h) each holding one `Event` protocol
// buffer: first {wall_time, file_version: "brain.Event:2"}, then
// {wall_time, step, summary} per write(). docs/report.md lists the tags
// lockstep writes.
//
// Each event reaches the file with one write(2) when written, so TensorBoard
// sees it at once and a killed writer leaves whole records (a torn last
// record is skipped by readers).
//
// Not thread-safe: one thread writes. Owns its file descriptor; move-only.
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/summary/summary.h"

namespace lockstep::summary {

class EventWriter {
 public:
  // Creates `dir` if needed and a new event file in it. `suffix` (e.g.
  // "sweep") tells apart two writers of one process in one directory.
  // Throws lockstep::Error naming the file when it cannot be created.
  explicit EventWriter(const std::string& dir, const std::string& suffix = "");
  ~EventWriter();
  EventWriter(EventWriter&& other) noexcept;
  EventWriter& operator=(EventWriter&& other) noexcept;
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Appends one Event {wall_time, step, summary}. wall_time < 0: now.
  // Throws lockstep::Error (naming the file) when the write fails.
  void write(int64_t step, const Summary& summary, double wall_time = -1);

  const std::string& path() const { return path_; }

  // Seconds since the Unix epoch, as Event.wall_time records them.
  static double now();

 private:
  void append_event(const std::string& event);

  std::string path_;
  int fd_ = -1;
};

// The event file name for this process: events.out.tfevents.<seconds>.<host>.<pid>[.suffix].
std::string event_file_name(double wall_time, const std::string& suffix);

}  // namespace lockstep::summary
