// StoreServer: connections, admission and the poll loop (Note [Admission] in
// server_impl.h); the operations are in server_requests.cc.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "rendezvous/secret.h"
#include "rendezvous/server_impl.h"

namespace lockstep::rendezvous {
namespace {

using net::Clock;
using wire::Status;

constexpr size_t kReadChunk = 64 << 10;
// An authenticated peer may pipeline requests, but beyond one whole frame plus
// a read chunk ahead of the request being served it is flooding the server.
constexpr size_t kMaxBuffered =
    wire::kLengthBytes + wire::kMaxBodyBytes + wire::kMacBytes + kReadChunk;
// All an unauthenticated connection can make the server hold.
constexpr size_t kMaxFirstFrame = wire::kLengthBytes + wire::kMaxFirstBodyBytes + wire::kMacBytes;
// Connections accepted per loop turn, so a burst of new connections cannot
// delay reading the hellos of honest ones already accepted.
constexpr int kAcceptBatch = 64;
constexpr auto kLogInterval = std::chrono::seconds(1);
// The kernel's accept queue. Connections wait there only until the next turn
// (the loop always accepts), so a deep queue just absorbs bursts: a job's
// workers all connecting at once, or a flood.
constexpr int kListenBacklog = 1024;

void write_stderr(const std::string& line) { std::fwrite(line.data(), 1, line.size(), stderr); }

}  // namespace

void RefusalLog::refused(std::string_view prefix, std::string_view peer, std::string_view reason,
                         Clock::time_point now) {
  flush(prefix, now);
  if (printed_any_ && now - last_line_ < kLogInterval) {
    ++suppressed_;
    last_ = fmt::format("{}: {}", peer, reason);
    return;
  }
  write_stderr(fmt::format("{}refused rendezvous connection from {}: {}\n", prefix, peer, reason));
  printed_any_ = true;
  last_line_ = now;
}

void RefusalLog::flush(std::string_view prefix, Clock::time_point now) {
  if (suppressed_ == 0 || now - last_line_ < kLogInterval) return;
  write_stderr(fmt::format(
      "{}refused {} more rendezvous connection(s) in the last {:.1f} s "
      "(the last from {})\n",
      prefix, suppressed_, std::chrono::duration<double>(now - last_line_).count(), last_));
  suppressed_ = 0;
  last_line_ = now;
}

std::optional<Clock::time_point> RefusalLog::due() const {
  if (suppressed_ == 0) return std::nullopt;
  return last_line_ + kLogInterval;
}

void StoreServer::Impl::refuse(Connection& c, std::string_view reason,
                               std::optional<uint32_t> marker) {
  if (c.dead) return;
  refused.fetch_add(1);
  refusal_log.refused(options.log_prefix, c.peer, reason, Clock::now());
  if (marker) {
    // Best effort: the greeting left the socket buffer nearly empty.
    std::string word = wire::Writer().u32(*marker).take();
    [[maybe_unused]] ssize_t n =
        ::send(c.fd.get(), word.data(), word.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  c.dead = true;
  c.fd.reset();  // now, not at the end of the turn: an fd is what a flood exhausts
}

void StoreServer::Impl::reply(Connection& c, Status status, std::string_view payload) {
  std::string body(1, static_cast<char>(status));
  body.append(payload);
  c.out +=
      wire::frame(options.secret, c.nonce, wire::Direction::kToClient, c.send_sequence++, body);
  flush(c);
}

void StoreServer::Impl::flush(Connection& c) {
  while (!c.dead && c.out_offset < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_offset += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;  // poll tells us when there is room
    } else {
      c.dead = true;  // the peer went away; nothing to report
    }
  }
  if (c.out_offset == c.out.size()) {
    c.out.clear();
    c.out_offset = 0;
  }
}

size_t StoreServer::Impl::count(bool authenticated) const {
  size_t n = 0;
  for (const auto& c : connections) n += !c->dead && c->authenticated == authenticated;
  return n;
}

bool StoreServer::Impl::authenticate(Connection& c) {
  if (count(true) >= options.max_connections) {
    refuse(c, fmt::format("too many clients (the limit is {})", options.max_connections),
           wire::kRefusedTooManyClients);
    return false;
  }
  c.authenticated = true;
  return true;
}

void StoreServer::Impl::process_input(Connection& c) {
  while (!c.dead && !c.pending && c.in.size() >= wire::kLengthBytes) {
    size_t length = wire::load_u32(c.in.data());
    size_t limit = c.authenticated ? wire::kMaxBodyBytes : wire::kMaxFirstBodyBytes;
    if (length > limit) {
      refuse(c, c.authenticated
                    ? fmt::format("oversized message ({} bytes; the limit is {})", length, limit)
                    : fmt::format("first message of {} bytes before authenticating (the limit "
                                  "is {})",
                                  length, limit));
      return;
    }
    size_t need = wire::kLengthBytes + length + wire::kMacBytes;
    if (c.in.size() < need) return;
    std::string_view body(c.in.data() + wire::kLengthBytes, length);
    std::string_view received(c.in.data() + wire::kLengthBytes + length, wire::kMacBytes);
    std::string expected =
        wire::mac(options.secret, c.nonce, wire::Direction::kToServer, c.recv_sequence, body);
    if (!wire::mac_matches(expected, received)) {
      refuse(c, "bad authentication",
             c.authenticated ? std::nullopt : std::optional(wire::kRefusedBadSecret));
      return;
    }
    ++c.recv_sequence;
    if (!c.authenticated && !authenticate(c)) return;
    try {
      handle_request(c, body);
    } catch (const Malformed& m) {
      refuse(c, "malformed request: " + m.reason);
      return;
    }
    c.in.erase(0, need);
  }
}

size_t StoreServer::Impl::read_room(const Connection& c) const {
  if (c.authenticated) return kReadChunk;
  // Never past the first frame: whatever follows waits for its MAC to verify.
  LOCKSTEP_DCHECK_LT(c.in.size(), kMaxFirstFrame,
                     "rendezvous: an unauthenticated connection holds a whole first frame that "
                     "process_input neither verified nor refused");
  return std::min(kReadChunk, kMaxFirstFrame - std::min(kMaxFirstFrame, c.in.size()));
}

void StoreServer::Impl::on_readable(Connection& c) {
  char buf[kReadChunk];
  for (;;) {
    size_t room = read_room(c);
    if (room == 0) return;
    ssize_t n = ::recv(c.fd.get(), buf, room, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > kMaxBuffered) {
        refuse(c, "sent more than one maximum-size message ahead of the replies");
        return;
      }
      process_input(c);
      if (c.dead) return;
    } else if (n == 0) {
      if (!c.authenticated && !c.in.empty()) refuse(c, "closed mid-message before authenticating");
      c.dead = true;
      return;
    } else if (errno == EINTR) {
      continue;
    } else {
      if (errno != EAGAIN) c.dead = true;
      return;
    }
  }
}

bool StoreServer::Impl::evict_oldest_unauthenticated(std::string_view why) {
  for (auto& c : connections) {
    if (c->dead || c->authenticated) continue;
    refuse(*c, why);
    return true;
  }
  return false;
}

void StoreServer::Impl::accept_some() {
  size_t waiting = count(false);
  for (int i = 0; i < kAcceptBatch; ++i) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      // Out of descriptors: an unauthenticated connection gives way, else we
      // stop accepting until some connection closes.
      if (evict_oldest_unauthenticated("evicted: the server is out of file descriptors")) {
        --waiting;
        continue;
      }
      accept_paused = true;
      return;
    }
    if (fd < 0) return;  // EAGAIN, or a transient error: poll will wake us again
    if (waiting >= options.max_unauthenticated &&
        evict_oldest_unauthenticated(
            fmt::format("evicted: still not authenticated when {} newer connections were waiting",
                        options.max_unauthenticated)))
      --waiting;
    auto c = std::make_unique<Connection>();
    c->fd = net::Fd(fd);
    c->peer = net::peer_name(fd);
    c->nonce = random_bytes(wire::kNonceBytes);
    c->accepted_at = Clock::now();
    c->out = wire::make_hello(c->nonce);
    flush(*c);
    connections.push_back(std::move(c));
    ++waiting;
  }
}

void StoreServer::Impl::expire(Clock::time_point now) {
  for (auto& c : connections) {
    if (c->dead) continue;
    if (c->pending && c->pending->deadline <= now) {
      c->pending.reset();
      reply(*c, Status::kTimeout, {});
      process_input(*c);
    } else if (!c->authenticated && c->accepted_at + options.handshake_timeout <= now) {
      refuse(*c, fmt::format("no authenticated message within the handshake timeout ({} ms)",
                             options.handshake_timeout.count()));
    }
  }
  refusal_log.flush(options.log_prefix, now);
}

std::optional<Clock::time_point> StoreServer::Impl::next_deadline() const {
  std::optional<Clock::time_point> next = refusal_log.due();
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& c : connections) {
    if (c->dead) continue;
    if (c->pending) consider(c->pending->deadline);
    if (!c->authenticated) consider(c->accepted_at + options.handshake_timeout);
  }
  return next;
}

void StoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  while (!stopping.load()) {
    fds.clear();
    fds.push_back({wakeup.get(), POLLIN, 0});
    fds.push_back({listener.get(), static_cast<short>(accept_paused ? 0 : POLLIN), 0});
    for (const auto& c : connections)
      fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    auto deadline = next_deadline();
    int timeout = deadline ? net::poll_timeout_ms(*deadline) : -1;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    // Index against the snapshot: accept_some appends after these. Readers
    // first, so honest clients' hellos are verified before a burst of new
    // connections can evict them (Note [Admission]).
    size_t polled = connections.size();
    for (size_t i = 0; i < polled; ++i) {
      Connection& c = *connections[i];
      short ev = fds[i + 2].revents;
      if (c.dead) continue;
      try {
        if (ev & POLLOUT) flush(c);
        if (ev & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
      } catch (const std::exception& e) {
        refuse(c, fmt::format("internal error: {}", e.what()));
      }
    }
    if (fds[1].revents & POLLIN) accept_some();
    expire(Clock::now());
    size_t before = connections.size();
    std::erase_if(connections, [](const auto& c) { return c->dead; });
    if (connections.size() < before) accept_paused = false;
    open_connections.store(connections.size());
  }
}

StoreServer::StoreServer(Options options) : impl_(std::make_unique<Impl>()) {
  if (options.secret.empty())
    throw InvalidArgument("rendezvous: StoreServer needs a non-empty secret (random_secret_hex)");
  if (options.max_connections == 0 || options.max_unauthenticated == 0)
    throw InvalidArgument(
        "rendezvous: StoreServer needs max_connections and max_unauthenticated >= 1");
  impl_->options = std::move(options);
  impl_->listener = net::listen_tcp({impl_->options.host, impl_->options.port}, kListenBacklog);
  impl_->port = net::local_port(impl_->listener.get());
  impl_->wakeup = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl_->wakeup) throw Error("rendezvous: eventfd() failed");
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::start() {
  if (impl_->thread.joinable()) return;
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

void StoreServer::stop() {
  if (!impl_) return;
  impl_->stopping.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wakeup.get(), &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->connections.clear();
}

uint16_t StoreServer::port() const { return impl_->port; }
std::string StoreServer::address() const {
  return fmt::format("{}:{}", impl_->options.host, impl_->port);
}
uint64_t StoreServer::refused_connections() const { return impl_->refused.load(); }
size_t StoreServer::open_connections() const { return impl_->open_connections.load(); }

}  // namespace lockstep::rendezvous
