#include "lockstep/base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::net {
namespace {

sockaddr_in to_sockaddr(const HostPort& where) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(where.port);
  std::string host = where.host == "localhost" ? "127.0.0.1" : where.host;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    throw InvalidArgument(
        fmt::format("rendezvous: '{}' is not an IPv4 address; use a dotted quad such as 127.0.0.1",
                    where.host));
  return addr;
}

// Waits for `events` on fd; throws TimeoutError when the deadline passes.
void wait_for(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return;
    if (rc == 0)
      throw TimeoutError(
          fmt::format("rendezvous: timed out {}; is the launcher still running?", what));
    if (errno != EINTR)
      throw Error(fmt::format("rendezvous: poll failed {}: {}", what, std::strerror(errno)));
  }
}

}  // namespace

HostPort parse_address(std::string_view address) {
  auto colon = address.rfind(':');
  HostPort out;
  if (colon == std::string_view::npos || colon == 0)
    throw InvalidArgument(fmt::format("rendezvous: address '{}' is not host:port", address));
  out.host = std::string(address.substr(0, colon));
  std::string_view port = address.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (ec != std::errc() || ptr != port.data() + port.size() || out.port == 0)
    throw InvalidArgument(
        fmt::format("rendezvous: address '{}' has no valid port (1-65535)", address));
  return out;
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Fd listen_tcp(const HostPort& where, int backlog) {
  sockaddr_in addr = to_sockaddr(where);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(fmt::format("rendezvous: socket() failed: {}", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd.get(), backlog) != 0)
    throw Error(fmt::format("rendezvous: cannot listen on {}:{}: {}", where.host, where.port,
                            std::strerror(errno)));
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

std::string peer_name(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char host[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &addr.sin_addr, host, sizeof host);
  return fmt::format("{}:{}", host, ntohs(addr.sin_port));
}

namespace {

// One non-blocking connect attempt bounded by `deadline` (a blocking connect
// to a host that drops SYNs would wait minutes, past any deadline). Returns 0
// or the errno of the failure.
int connect_once(int fd, const sockaddr_in& addr, Clock::time_point deadline) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int err = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready = ::poll(&p, 1, poll_timeout_ms(deadline));
      socklen_t len = sizeof err;
      if (ready <= 0)
        err = ETIMEDOUT;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
  }
  ::fcntl(fd, F_SETFL, flags);
  return err;
}

}  // namespace

Fd connect_tcp(const HostPort& where, Clock::time_point deadline) {
  sockaddr_in addr = to_sockaddr(where);
  auto backoff = std::chrono::milliseconds(10);
  // A listener whose accept queue is full drops our SYN and the kernel resends
  // it only after a second; a fresh attempt after 100 ms (doubling, for slow
  // networks) gets through sooner when the server is draining a flood.
  auto attempt_limit = std::chrono::milliseconds(100);
  for (;;) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw Error(fmt::format("rendezvous: socket() failed: {}", std::strerror(errno)));
    int err = connect_once(fd.get(), addr, std::min(deadline, Clock::now() + attempt_limit));
    if (err == 0) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    // A remote host's network may still be coming up: unreachable is retried
    // like refused, until the deadline.
    bool retryable = err == ECONNREFUSED || err == EINTR || err == ETIMEDOUT || err == EAGAIN ||
                     err == ENETUNREACH || err == EHOSTUNREACH;
    bool waited = err == ETIMEDOUT;  // the attempt used up its time already
    if (!retryable || Clock::now() + (waited ? std::chrono::milliseconds(0) : backoff) >= deadline)
      throw Error(fmt::format(
          "rendezvous: cannot connect to {}:{}: {}; check LOCKSTEP_RENDEZVOUS and that the "
          "launcher is running",
          where.host, where.port, std::strerror(err)));
    if (waited) {
      attempt_limit = std::min(attempt_limit * 2, std::chrono::milliseconds(2000));
      continue;
    }
    // Nothing to wait on while nobody listens: back off and retry.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

void write_all(int fd, std::string_view data, Clock::time_point deadline, std::string_view what) {
  while (!data.empty()) {
    wait_for(fd, POLLOUT, deadline, what);
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
      throw Error(fmt::format("rendezvous: lost the connection to the store {}: {}", what,
                              std::strerror(errno)));
    }
  }
}

bool read_exact(int fd, char* out, size_t n, Clock::time_point deadline, std::string_view what) {
  size_t got = 0;
  while (got < n) {
    wait_for(fd, POLLIN, deadline, what);
    ssize_t r = ::recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      if (got == 0) return false;
      throw Error(fmt::format("rendezvous: the store closed the connection mid-message {}", what));
    } else if (errno != EINTR && errno != EAGAIN) {
      throw Error(fmt::format("rendezvous: lost the connection to the store {}: {}", what,
                              std::strerror(errno)));
    }
  }
  return true;
}

int poll_timeout_ms(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  // Round up so we do not spin on sub-millisecond remainders.
  return left >= INT_MAX ? INT_MAX : static_cast<int>(left) + 1;
}

std::string source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string name = host.substr(host.find('@') == std::string::npos ? 0 : host.find('@') + 1);
  if (::getaddrinfo(name.c_str(), "9", &hints, &found) != 0 || !found) return "";
  std::string result;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
      result = text;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return result;
}

}  // namespace lockstep::net
