// StoreServer: one thread, one poll loop, every connection non-blocking.
//
// A connection holds at most one request in flight (clients are blocking), so
// a GET/WAIT whose keys are missing parks the connection until a SET/ADD makes
// them exist or its deadline passes; nothing else ever blocks the loop.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/rendezvous/store.h"
#include "rendezvous/secret.h"
#include "rendezvous/socket.h"
#include "rendezvous/wire.h"

namespace lockstep::rendezvous {
namespace {

using net::Clock;
using wire::Op;
using wire::Status;

constexpr size_t kReadChunk = 64 << 10;
// Beyond one whole frame plus a read chunk, a peer is sending faster than the
// protocol allows (it must wait for each reply).
constexpr size_t kMaxBuffered = wire::kLengthBytes + wire::kMaxBodyBytes + wire::kMacBytes + kReadChunk;

// Thrown while parsing an authenticated request that breaks the format.
struct Malformed {
  std::string reason;
};

struct Pending {
  Op op;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

struct Connection {
  net::Fd fd;
  std::string peer;
  std::string nonce;
  std::string in;
  std::string out;
  size_t out_offset = 0;
  uint64_t recv_sequence = 0;
  uint64_t send_sequence = 0;
  bool authenticated = false;
  bool dead = false;
  Clock::time_point accepted_at;
  std::optional<Pending> pending;
};

std::optional<int64_t> parse_counter(const std::string& text) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

std::vector<std::string> read_keys(wire::Reader& r) {
  uint32_t count = r.u32();
  if (count > kMaxKeysPerWait) throw Malformed{fmt::format("{} keys in one request", count)};
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < count && !r.failed(); ++i) keys.emplace_back(r.bytes(kMaxKeyBytes));
  return keys;
}

void require_end(const wire::Reader& r) {
  if (!r.at_end()) throw Malformed{"fields do not match the operation"};
}

}  // namespace

struct StoreServer::Impl {
  Options options;
  net::Fd listener;
  net::Fd wakeup;
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> refused{0};
  std::map<std::string, std::string, std::less<>> data;
  std::vector<std::unique_ptr<Connection>> connections;

  void loop();
  std::optional<Clock::time_point> next_deadline() const;
  void accept_all();
  void on_readable(Connection& c);
  void process_input(Connection& c);
  void handle_request(Connection& c, std::string_view body);
  bool try_complete(Connection& c);
  void complete_waiters();
  void expire(Clock::time_point now);
  void reply(Connection& c, Status status, std::string_view payload);
  void flush(Connection& c);
  void refuse(Connection& c, std::string_view reason);
  bool has(std::string_view key) const { return data.find(key) != data.end(); }
};

void StoreServer::Impl::refuse(Connection& c, std::string_view reason) {
  if (c.dead) return;
  c.dead = true;
  refused.fetch_add(1);
  std::string line = fmt::format("{}refused rendezvous connection from {}: {}\n",
                                 options.log_prefix, c.peer, reason);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void StoreServer::Impl::reply(Connection& c, Status status, std::string_view payload) {
  std::string body(1, static_cast<char>(status));
  body.append(payload);
  c.out += wire::frame(options.secret, c.nonce, wire::Direction::kToClient, c.send_sequence++, body);
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

bool StoreServer::Impl::try_complete(Connection& c) {
  const Pending& p = *c.pending;
  for (const auto& key : p.keys)
    if (!has(key)) return false;
  if (p.op == Op::kGet) {
    reply(c, Status::kOk, wire::Writer().bytes(data.find(p.keys[0])->second).take());
  } else {
    reply(c, Status::kOk, {});
  }
  c.pending.reset();
  return true;
}

void StoreServer::Impl::complete_waiters() {
  for (auto& c : connections)
    if (!c->dead && c->pending && try_complete(*c)) process_input(*c);
}

void StoreServer::Impl::handle_request(Connection& c, std::string_view body) {
  wire::Reader r(body);
  auto op = static_cast<Op>(r.u8());
  switch (op) {
    case Op::kSet: {
      std::string key(r.bytes(kMaxKeyBytes));
      std::string value(r.bytes(kMaxValueBytes));
      require_end(r);
      data[key] = std::move(value);
      reply(c, Status::kOk, {});
      complete_waiters();
      return;
    }
    case Op::kGet:
    case Op::kWait: {
      std::vector<std::string> keys;
      if (op == Op::kGet) keys.emplace_back(r.bytes(kMaxKeyBytes));
      else keys = read_keys(r);
      uint32_t timeout_ms = r.u32();
      require_end(r);
      if (keys.empty()) throw Malformed{"a wait for no keys"};
      c.pending = Pending{op, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms)};
      try_complete(c);
      return;
    }
    case Op::kAdd: {
      std::string key(r.bytes(kMaxKeyBytes));
      auto delta = static_cast<int64_t>(r.u64());
      require_end(r);
      int64_t current = 0;
      if (auto it = data.find(key); it != data.end()) {
        auto parsed = parse_counter(it->second);
        if (!parsed) {
          reply(c, Status::kError,
                fmt::format("rendezvous: key '{}' holds a value that is not a counter; use another "
                            "key for add()", key));
          return;
        }
        current = *parsed;
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(current, delta, &sum)) {
        reply(c, Status::kError, fmt::format("rendezvous: add() on key '{}' overflows int64", key));
        return;
      }
      data[key] = std::to_string(sum);
      reply(c, Status::kOk, wire::Writer().u64(static_cast<uint64_t>(sum)).take());
      complete_waiters();
      return;
    }
    case Op::kCheck: {
      std::vector<std::string> keys = read_keys(r);
      require_end(r);
      bool all = true;
      for (const auto& key : keys) all = all && has(key);
      reply(c, Status::kOk, wire::Writer().u8(all ? 1 : 0).take());
      return;
    }
    case Op::kDelete: {
      std::string key(r.bytes(kMaxKeyBytes));
      require_end(r);
      bool existed = data.erase(key) > 0;
      reply(c, Status::kOk, wire::Writer().u8(existed ? 1 : 0).take());
      return;
    }
  }
  throw Malformed{fmt::format("unknown operation {}", static_cast<int>(op))};
}

void StoreServer::Impl::process_input(Connection& c) {
  while (!c.dead && !c.pending && c.in.size() >= wire::kLengthBytes) {
    size_t length = wire::load_u32(c.in.data());
    if (length > wire::kMaxBodyBytes) {
      refuse(c, fmt::format("oversized message ({} bytes; the limit is {})", length,
                            wire::kMaxBodyBytes));
      return;
    }
    size_t need = wire::kLengthBytes + length + wire::kMacBytes;
    if (c.in.size() < need) return;
    std::string_view body(c.in.data() + wire::kLengthBytes, length);
    std::string_view received(c.in.data() + wire::kLengthBytes + length, wire::kMacBytes);
    std::string expected =
        wire::mac(options.secret, c.nonce, wire::Direction::kToServer, c.recv_sequence, body);
    if (!wire::mac_matches(expected, received)) {
      refuse(c, "bad authentication");
      return;
    }
    ++c.recv_sequence;
    c.authenticated = true;
    try {
      handle_request(c, body);
    } catch (const Malformed& m) {
      refuse(c, "malformed request: " + m.reason);
      return;
    }
    c.in.erase(0, need);
  }
}

void StoreServer::Impl::on_readable(Connection& c) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > kMaxBuffered) {
        refuse(c, "sent more than one message without waiting for the reply");
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

void StoreServer::Impl::accept_all() {
  for (;;) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll will wake us again
    auto c = std::make_unique<Connection>();
    c->fd = net::Fd(fd);
    c->peer = net::peer_name(fd);
    c->nonce = random_bytes(wire::kNonceBytes);
    c->accepted_at = Clock::now();
    c->out = wire::make_hello(c->nonce);
    flush(*c);
    connections.push_back(std::move(c));
    if (connections.size() >= options.max_connections) return;
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
      refuse(*c, "no authenticated message within the handshake timeout");
    }
  }
}

std::optional<Clock::time_point> StoreServer::Impl::next_deadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& c : connections) {
    if (c->pending) consider(c->pending->deadline);
    if (!c->authenticated) consider(c->accepted_at + options.handshake_timeout);
  }
  return next;
}

void StoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  while (!stopping.load()) {
    fds.clear();
    bool room = connections.size() < options.max_connections;
    fds.push_back({wakeup.get(), POLLIN, 0});
    fds.push_back({listener.get(), static_cast<short>(room ? POLLIN : 0), 0});
    for (const auto& c : connections)
      fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    auto deadline = next_deadline();
    int timeout = deadline ? net::poll_timeout_ms(*deadline) : -1;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    // Index against the snapshot: accept_all appends after these.
    size_t polled = connections.size();
    for (size_t i = 0; i < polled; ++i) {
      Connection& c = *connections[i];
      short ev = fds[i + 2].revents;
      try {
        if (ev & POLLOUT) flush(c);
        if (ev & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
      } catch (const std::exception& e) {
        refuse(c, fmt::format("internal error: {}", e.what()));
      }
    }
    if (fds[1].revents & POLLIN) accept_all();
    expire(Clock::now());
    std::erase_if(connections, [](const auto& c) { return c->dead; });
  }
}

StoreServer::StoreServer(Options options) : impl_(std::make_unique<Impl>()) {
  if (options.secret.empty())
    throw InvalidArgument("rendezvous: StoreServer needs a non-empty secret (random_secret_hex)");
  impl_->options = std::move(options);
  impl_->listener = net::listen_tcp({impl_->options.host, impl_->options.port}, 128);
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

}  // namespace lockstep::rendezvous
