// Small POSIX socket helpers: owned descriptors, TCP listen/connect and I/O
// with deadlines, address parsing. The rendezvous store and its clients talk
// through them; the launcher and the comm layer's Slurm world ask them which
// local address reaches a host. Not a stable API. Stateless functions,
// thread-safe; an Fd is owned by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::net {

using Clock = std::chrono::steady_clock;

struct HostPort {
  std::string host;
  uint16_t port = 0;
};
// Parses "host:port" (IPv4 dotted quad or "localhost"); throws InvalidArgument.
HostPort parse_address(std::string_view address);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  int get() const { return fd_; }
  int release();
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A non-blocking listening socket bound to host:port (port 0 = ephemeral).
Fd listen_tcp(const HostPort& where, int backlog);
uint16_t local_port(int fd);
std::string peer_name(int fd);  // "a.b.c.d:port"

// Connects, retrying refused connections until `deadline` (the server may not
// be up yet). Returns a blocking socket with TCP_NODELAY.
Fd connect_tcp(const HostPort& where, Clock::time_point deadline);

// Blocking I/O on `fd` that gives up at `deadline`. read_exact returns false on
// a clean EOF before the first byte; both throw Error/TimeoutError otherwise.
void write_all(int fd, std::string_view data, Clock::time_point deadline, std::string_view what);
bool read_exact(int fd, char* out, size_t n, Clock::time_point deadline, std::string_view what);

// Milliseconds until `deadline` for poll(): 0 when past, capped at INT_MAX.
int poll_timeout_ms(Clock::time_point deadline);

// The local IPv4 address the kernel would use to reach `host` ("user@" is
// ignored; a UDP connect sends nothing), or "" when the name does not
// resolve to a routable IPv4 address.
std::string source_address_towards(const std::string& host);

}  // namespace lockstep::net
