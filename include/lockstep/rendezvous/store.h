// The rendezvous store: a small authenticated TCP key-value store.
//
// `lockstep run` serves one StoreServer per job on 127.0.0.1 (an ephemeral
// port) and tells the workers where it is through LOCKSTEP_RENDEZVOUS and the
// job's secret through LOCKSTEP_SECRET. Workers (the Gloo backend, elastic
// mode, user code) talk to it with a StoreClient.
//
// Security: the server greets every connection with a fresh random nonce and
// each message then carries HMAC-SHA256(secret, nonce | direction | sequence
// number | payload). A message that fails the check closes the connection, so
// forgeries, replays (within or across connections) and reordering all fail.
// Nothing received is ever interpreted as anything but bytes, lengths and
// integers. The wire format is in docs/rendezvous.md.
//
// Values are opaque bytes. add() keeps its counter as the decimal text of an
// int64, so get() of a counter returns e.g. "3".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace lockstep::rendezvous {

inline constexpr size_t kMaxKeyBytes = 4 << 10;
inline constexpr size_t kMaxValueBytes = 64 << 20;
inline constexpr size_t kMaxKeysPerWait = 1024;
inline constexpr size_t kSecretBytes = 32;

// A fresh secret of kSecretBytes random bytes (getrandom), hex-encoded, as it
// is passed in LOCKSTEP_SECRET. Throws lockstep::Error if the kernel has no
// randomness to give.
std::string random_secret_hex();
// The raw key bytes of a hex secret. Throws InvalidArgument naming the problem
// if `hex` is empty, of odd length or not hexadecimal.
std::string decode_secret_hex(std::string_view hex);

// Serves the store until stop() or destruction.
//
// Thread-safety: construct, start, stop and destroy from one thread; the
// server's work runs on its own thread. port()/address() are safe any time.
class StoreServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";             // bound explicitly, never INADDR_ANY by default
    uint16_t port = 0;                          // 0 = ephemeral
    std::string secret;                         // raw key bytes (decode_secret_hex)
    std::string log_prefix = "lockstep run: ";  // for refused connections on stderr
    // Authenticated connections (clients holding the secret).
    size_t max_connections = 1024;
    // Connections that have not yet sent a frame whose MAC verifies. Beyond
    // this, a new connection evicts the oldest of them (docs/rendezvous.md,
    // "Admission"), so idle connections cannot keep clients out.
    size_t max_unauthenticated = 256;
    // A connection must send its first authenticated message within this
    // time. Honest clients do so one round trip after connecting.
    std::chrono::milliseconds handshake_timeout{1000};
  };

  // Binds and listens; throws lockstep::Error naming the address on failure.
  explicit StoreServer(Options options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  void start();  // starts the serving thread
  void stop();   // idempotent; closes every connection and joins the thread

  uint16_t port() const;
  std::string address() const;  // "host:port"
  // Connections closed for bad authentication, malformed input, the handshake
  // timeout or eviction so far.
  uint64_t refused_connections() const;
  // Connections open after the serving thread's last turn (for tests and
  // diagnostics).
  size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct StoreClientOptions {
  // Connecting, including the authenticating HELLO, retries until this: the
  // launcher may not be listening yet, and a store flooded with connections
  // may drop ours before it authenticated. A refused secret fails at once.
  std::chrono::milliseconds connect_timeout{30000};
  // How long to wait for the server's reply beyond the operation's own timeout.
  std::chrono::milliseconds reply_slack{10000};
};

// A blocking connection to a StoreServer.
//
// Thread-safety: not thread-safe; give each thread its own client. Every call
// has a deadline; server death or a broken connection raises lockstep::Error,
// a wait that runs out raises lockstep::TimeoutError naming the key(s).
class StoreClient {
 public:
  using Options = StoreClientOptions;

  // `address` is "host:port"; `secret` the raw key bytes.
  StoreClient(std::string address, std::string secret, Options options = {});
  // Uses LOCKSTEP_RENDEZVOUS and LOCKSTEP_SECRET (as set by `lockstep run`).
  static StoreClient from_environment(Options options = {});
  ~StoreClient();
  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;

  void set(std::string_view key, std::string_view value);
  // Blocks until `key` exists, then returns its value.
  std::string get(std::string_view key, std::chrono::milliseconds timeout);
  // Atomically adds `delta` to the counter `key` (absent = 0); returns the sum.
  int64_t add(std::string_view key, int64_t delta);
  // True when every key exists now.
  bool check(std::span<const std::string> keys);
  // Blocks until every key exists.
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout);
  // Deletes `key`; returns whether it existed.
  bool remove(std::string_view key);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::rendezvous
