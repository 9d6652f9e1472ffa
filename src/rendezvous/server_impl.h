// StoreServer internals: one thread, one poll loop, every connection
// non-blocking. Internal to src/rendezvous (server.cc: I/O and admission;
// server_requests.cc: the operations).
//
// Note [Admission]
// ~~~~~~~~~~~~~~~~
// Anyone who can reach the port can connect, so nothing a connection does
// before its first frame's MAC verifies may cost the server much:
//   * an unauthenticated connection buffers at most one first frame of
//     wire::kMaxFirstBodyBytes; a larger announced length is refused at once;
//   * unauthenticated connections have their own small limit
//     (Options::max_unauthenticated). The server always keeps accepting: a
//     new connection beyond the limit evicts the oldest unauthenticated one,
//     so an idle flood cannot keep an honest client (which authenticates
//     within a round trip of connecting) out of the accept queue;
//   * an unauthenticated connection is dropped after Options::handshake_timeout
//     (1 s by default);
//   * only authenticated connections count against Options::max_connections,
//     and only they may buffer a whole maximum-size frame.
// Refusals are logged at most once a second, with a count of those not shown,
// so a flood cannot fill the launcher's stderr either.
//
// A connection holds at most one request in progress (clients are blocking);
// a GET/WAIT whose keys are missing parks the connection until a SET/ADD makes
// them exist or its deadline passes; nothing else ever blocks the loop.
// Requests pipelined behind it are answered in order, one at a time.
//
// Thread-safety: everything here belongs to the serving thread, except the
// atomics read by StoreServer's accessors.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
#include "rendezvous/wire.h"

namespace lockstep::rendezvous {

// Thrown while parsing an authenticated request that breaks the format.
struct Malformed {
  std::string reason;
};

struct PendingRequest {
  wire::Op op;
  std::vector<std::string> keys;
  net::Clock::time_point deadline;
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
  net::Clock::time_point accepted_at;
  std::optional<PendingRequest> pending;
};

// Rate-limited log of refused connections (Note [Admission]).
class RefusalLog {
 public:
  void refused(std::string_view prefix, std::string_view peer, std::string_view reason,
               net::Clock::time_point now);
  // Prints the count of refusals not shown, once their second is over.
  void flush(std::string_view prefix, net::Clock::time_point now);
  // When flush() has something to print.
  std::optional<net::Clock::time_point> due() const;

 private:
  bool printed_any_ = false;
  net::Clock::time_point last_line_{};
  uint64_t suppressed_ = 0;
  std::string last_;  // peer and reason of the last refusal not shown
};

struct StoreServer::Impl {
  Options options;
  net::Fd listener;
  net::Fd wakeup;
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> refused{0};
  std::atomic<size_t> open_connections{0};
  RefusalLog refusal_log;
  bool accept_paused = false;  // out of file descriptors with nobody to evict
  std::map<std::string, std::string, std::less<>> data;
  std::vector<std::unique_ptr<Connection>> connections;  // in accept order

  // server.cc
  void loop();
  std::optional<net::Clock::time_point> next_deadline() const;
  void accept_some();
  bool evict_oldest_unauthenticated(std::string_view why);
  size_t count(bool authenticated) const;
  void on_readable(Connection& c);
  size_t read_room(const Connection& c) const;
  void process_input(Connection& c);
  bool authenticate(Connection& c);
  void expire(net::Clock::time_point now);
  void reply(Connection& c, wire::Status status, std::string_view payload);
  void flush(Connection& c);
  void refuse(Connection& c, std::string_view reason, std::optional<uint32_t> marker = {});
  // server_requests.cc: an authenticated request, one handler per operation.
  void handle_request(Connection& c, std::string_view body);
  void handle_set(Connection& c, wire::Reader& r);
  void handle_get_or_wait(Connection& c, wire::Reader& r, wire::Op op);
  void handle_add(Connection& c, wire::Reader& r);
  void handle_check(Connection& c, wire::Reader& r);
  void handle_delete(Connection& c, wire::Reader& r);
  bool try_complete(Connection& c);
  void complete_waiters();
  bool has(std::string_view key) const { return data.find(key) != data.end(); }
};

}  // namespace lockstep::rendezvous
