#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
#include "rendezvous/wire.h"

namespace lockstep::rendezvous {
namespace {

using net::Clock;
using wire::Op;
using wire::Status;

std::string describe_keys(std::span<const std::string> keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i)
    out += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  if (keys.size() > 8) out += fmt::format(" and {} more", keys.size() - 8);
  return out;
}

void check_key(std::string_view key) {
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(fmt::format(
        "rendezvous: key of {} bytes is longer than the {}-byte limit", key.size(), kMaxKeyBytes));
}

uint32_t to_wire_ms(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) throw InvalidArgument("rendezvous: timeouts must not be negative");
  return static_cast<uint32_t>(std::min<int64_t>(timeout.count(), UINT32_MAX));
}

}  // namespace

struct StoreClient::Impl {
  std::string address;
  std::string secret;
  Options options;
  net::Fd fd;
  std::string nonce;
  uint64_t send_sequence = 0;
  uint64_t recv_sequence = 0;

  // The connection was closed before a reply (not a refusal, not a timeout).
  struct ConnectionClosed {
    std::string what;
  };
  struct NotAStore : Error {
    using Error::Error;
  };
  // The store closed the connection during the handshake: retried.
  struct HandshakeDropped {
    std::string what;
  };

  void connect();
  void handshake(Clock::time_point deadline);
  // Sends one request and returns the reply's status and payload. Any failure
  // other than a server-side timeout leaves the connection closed.
  std::pair<Status, std::string> call(const std::string& body, std::chrono::milliseconds op_timeout,
                                      std::string_view what);
  std::string read_reply(Clock::time_point deadline, std::string_view what);
  std::string take_ok(std::pair<Status, std::string> reply, std::string_view what);
};

// Connecting retries until connect_timeout: the launcher may not listen yet,
// and a store under a connection flood may evict us before our hello
// (docs/rendezvous.md, "Admission"). A refusal of the secret is final.
void StoreClient::Impl::connect() {
  auto deadline = Clock::now() + options.connect_timeout;
  auto backoff = std::chrono::milliseconds(5);
  for (int attempt = 1;; ++attempt) {
    try {
      handshake(deadline);
      return;
    } catch (const HandshakeDropped& dropped) {
      fd.reset();
      if (Clock::now() + backoff >= deadline)
        throw Error(fmt::format(
            "rendezvous: the store at {} closed the connection ({}) on all {} attempts within {} ms; "
            "it is overloaded or flooded with connections, or not a lockstep rendezvous store",
            address, dropped.what, attempt, options.connect_timeout.count()));
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
  }
}

void StoreClient::Impl::handshake(Clock::time_point deadline) {
  fd = net::connect_tcp(net::parse_address(address), deadline);
  send_sequence = recv_sequence = 0;
  std::string hello(wire::kHelloBytes, '\0');
  bool greeted = false;
  try {
    greeted =
        net::read_exact(fd.get(), hello.data(), hello.size(), deadline, "reading the greeting");
    if (greeted) {
      auto parsed = wire::parse_hello(hello);
      if (!parsed)
        throw NotAStore(
            fmt::format("rendezvous: {} is not a lockstep rendezvous store (bad "
                        "greeting); check LOCKSTEP_RENDEZVOUS",
                        address));
      nonce = *parsed;
      std::string body = wire::Writer().u8(static_cast<uint8_t>(Op::kHello)).take();
      net::write_all(fd.get(),
                     wire::frame(secret, nonce, wire::Direction::kToServer, send_sequence++, body),
                     deadline, "sending the hello");
    }
  } catch (const TimeoutError&) {
    throw;
  } catch (const NotAStore&) {
    throw;
  } catch (const Error& e) {
    throw HandshakeDropped{e.what()};  // reset by the server
  }
  if (!greeted) throw HandshakeDropped{"before greeting"};
  std::string reply;
  try {
    reply = read_reply(deadline, "authenticating");
  } catch (const ConnectionClosed& closed) {
    throw HandshakeDropped{closed.what};
  }
  if (reply.size() != 1 || static_cast<Status>(reply[0]) != Status::kOk)
    throw Error(
        fmt::format("rendezvous: {} answered the hello with something else; it is not "
                    "a compatible lockstep rendezvous store",
                    address));
}

std::string StoreClient::Impl::read_reply(Clock::time_point deadline, std::string_view what) {
  char length_bytes[wire::kLengthBytes];
  bool got = false;
  try {
    got = net::read_exact(fd.get(), length_bytes, sizeof length_bytes, deadline, what);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    throw ConnectionClosed{e.what()};  // reset or cut mid-word
  }
  if (!got)
    throw ConnectionClosed{fmt::format("the store at {} closed the connection {}", address, what)};
  size_t length = wire::load_u32(length_bytes);
  if (length == wire::kRefusedBadSecret)
    throw Error(fmt::format(
        "rendezvous: the store at {} refused this client's authentication: LOCKSTEP_SECRET differs "
        "from the launcher's (start workers with `lockstep run`, which sets both)",
        address));
  if (length == wire::kRefusedTooManyClients)
    throw Error(
        fmt::format("rendezvous: the store at {} already serves its maximum number of "
                    "clients; close unused StoreClients",
                    address));
  if (length > wire::kMaxBodyBytes)
    throw Error(fmt::format("rendezvous: reply from {} is oversized ({} bytes)", address, length));
  std::string rest(length + wire::kMacBytes, '\0');
  net::read_exact(fd.get(), rest.data(), rest.size(), deadline, what);
  std::string_view body(rest.data(), length);
  std::string expected = wire::mac(secret, nonce, wire::Direction::kToClient, recv_sequence, body);
  if (!wire::mac_matches(expected, std::string_view(rest).substr(length)))
    throw Error(
        fmt::format("rendezvous: reply from {} failed authentication; the server does not "
                    "hold this job's secret",
                    address));
  ++recv_sequence;
  rest.resize(length);
  return rest;
}

std::pair<Status, std::string> StoreClient::Impl::call(const std::string& body,
                                                       std::chrono::milliseconds op_timeout,
                                                       std::string_view what) {
  if (!fd)
    throw Error(
        fmt::format("rendezvous: the connection to {} was closed by an earlier error; "
                    "create a new StoreClient",
                    address));
  try {
    auto deadline = Clock::now() + op_timeout + options.reply_slack;
    std::string message =
        wire::frame(secret, nonce, wire::Direction::kToServer, send_sequence++, body);
    net::write_all(fd.get(), message, deadline, what);
    std::string reply;
    try {
      reply = read_reply(deadline, what);
    } catch (const ConnectionClosed& closed) {
      throw Error(
          fmt::format("rendezvous: {} (the launcher exited or the connection broke)", closed.what));
    }
    if (reply.empty()) throw Error(fmt::format("rendezvous: empty reply from {}", address));
    auto status = static_cast<Status>(reply[0]);
    if (status != Status::kOk && status != Status::kTimeout && status != Status::kError)
      throw Error(fmt::format("rendezvous: reply from {} has unknown status {}", address,
                              static_cast<int>(status)));
    return {status, reply.substr(1)};
  } catch (...) {
    fd.reset();
    throw;
  }
}

std::string StoreClient::Impl::take_ok(std::pair<Status, std::string> reply,
                                       std::string_view what) {
  if (reply.first == Status::kError) {
    throw Error(std::string(reply.second));
  }
  if (reply.first == Status::kTimeout)
    throw TimeoutError(fmt::format("rendezvous: timed out {}", what));
  return std::move(reply.second);
}

StoreClient::StoreClient(std::string address, std::string secret, Options options)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = std::move(address);
  impl_->secret = std::move(secret);
  impl_->options = options;
  if (impl_->secret.empty())
    throw InvalidArgument("rendezvous: StoreClient needs the job's secret (LOCKSTEP_SECRET)");
  impl_->connect();
}

StoreClient StoreClient::from_environment(Options options) {
  std::string address = knob_string("LOCKSTEP_RENDEZVOUS");
  std::string secret = knob_string("LOCKSTEP_SECRET");
  if (address.empty() || secret.empty())
    throw InvalidArgument(
        "rendezvous: LOCKSTEP_RENDEZVOUS and LOCKSTEP_SECRET are not set; start the workers with "
        "`lockstep run`");
  return StoreClient(std::move(address), decode_secret_hex(secret), options);
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

void StoreClient::set(std::string_view key, std::string_view value) {
  check_key(key);
  if (value.size() > kMaxValueBytes)
    throw InvalidArgument(fmt::format("rendezvous: value for key '{}' is {} bytes; the limit is {}",
                                      key, value.size(), kMaxValueBytes));
  std::string what = fmt::format("setting key '{}'", key);
  auto body = wire::Writer().u8(static_cast<uint8_t>(Op::kSet)).bytes(key).bytes(value).take();
  impl_->take_ok(impl_->call(body, std::chrono::milliseconds(0), what), what);
}

std::string StoreClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  check_key(key);
  std::string what = fmt::format("after {} ms waiting for key '{}'", timeout.count(), key);
  auto body =
      wire::Writer().u8(static_cast<uint8_t>(Op::kGet)).bytes(key).u32(to_wire_ms(timeout)).take();
  std::string payload = impl_->take_ok(impl_->call(body, timeout, what), what);
  wire::Reader r(payload);
  std::string value(r.bytes(kMaxValueBytes));
  if (!r.at_end()) throw Error(fmt::format("rendezvous: malformed reply to get('{}')", key));
  return value;
}

int64_t StoreClient::add(std::string_view key, int64_t delta) {
  check_key(key);
  std::string what = fmt::format("adding to key '{}'", key);
  auto body = wire::Writer()
                  .u8(static_cast<uint8_t>(Op::kAdd))
                  .bytes(key)
                  .u64(static_cast<uint64_t>(delta))
                  .take();
  std::string payload = impl_->take_ok(impl_->call(body, std::chrono::milliseconds(0), what), what);
  wire::Reader r(payload);
  auto value = static_cast<int64_t>(r.u64());
  if (!r.at_end()) throw Error(fmt::format("rendezvous: malformed reply to add('{}')", key));
  return value;
}

namespace {
std::string keys_body(Op op, std::span<const std::string> keys) {
  if (keys.size() > kMaxKeysPerWait)
    throw InvalidArgument(fmt::format("rendezvous: {} keys in one call; the limit is {}",
                                      keys.size(), kMaxKeysPerWait));
  wire::Writer w;
  w.u8(static_cast<uint8_t>(op)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) {
    check_key(key);
    w.bytes(key);
  }
  return w.take();
}
}  // namespace

bool StoreClient::check(std::span<const std::string> keys) {
  std::string what = fmt::format("checking keys {}", describe_keys(keys));
  std::string payload = impl_->take_ok(
      impl_->call(keys_body(Op::kCheck, keys), std::chrono::milliseconds(0), what), what);
  if (payload.size() != 1) throw Error("rendezvous: malformed reply to check()");
  return payload[0] != 0;
}

void StoreClient::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  std::string what =
      fmt::format("after {} ms waiting for keys {}", timeout.count(), describe_keys(keys));
  std::string body = keys_body(Op::kWait, keys);
  body += wire::Writer().u32(to_wire_ms(timeout)).take();
  impl_->take_ok(impl_->call(body, timeout, what), what);
}

bool StoreClient::remove(std::string_view key) {
  check_key(key);
  std::string what = fmt::format("deleting key '{}'", key);
  auto body = wire::Writer().u8(static_cast<uint8_t>(Op::kDelete)).bytes(key).take();
  std::string payload = impl_->take_ok(impl_->call(body, std::chrono::milliseconds(0), what), what);
  if (payload.size() != 1) throw Error("rendezvous: malformed reply to remove()");
  return payload[0] != 0;
}

}  // namespace lockstep::rendezvous
