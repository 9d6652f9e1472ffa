// StoreServer: the operations of authenticated requests (docs/rendezvous.md).
#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace lockstep::rendezvous {
namespace {

using net::Clock;
using wire::Op;
using wire::Status;

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

bool StoreServer::Impl::try_complete(Connection& c) {
  const PendingRequest& p = *c.pending;
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
    case Op::kHello:
      require_end(r);
      reply(c, Status::kOk, {});
      return;
    case Op::kSet: return handle_set(c, r);
    case Op::kGet:
    case Op::kWait: return handle_get_or_wait(c, r, op);
    case Op::kAdd: return handle_add(c, r);
    case Op::kCheck: return handle_check(c, r);
    case Op::kDelete: return handle_delete(c, r);
  }
  throw Malformed{fmt::format("unknown operation {}", static_cast<int>(op))};
}

void StoreServer::Impl::handle_set(Connection& c, wire::Reader& r) {
  std::string key(r.bytes(kMaxKeyBytes));
  std::string value(r.bytes(kMaxValueBytes));
  require_end(r);
  data[key] = std::move(value);
  reply(c, Status::kOk, {});
  complete_waiters();
}

// get waits for one key and returns its value; wait for several, returning
// nothing. Either replies now when the keys are there, else when they are
// set (complete_waiters) or at the request's deadline (expire).
void StoreServer::Impl::handle_get_or_wait(Connection& c, wire::Reader& r, Op op) {
  std::vector<std::string> keys;
  if (op == Op::kGet)
    keys.emplace_back(r.bytes(kMaxKeyBytes));
  else
    keys = read_keys(r);
  uint32_t timeout_ms = r.u32();
  require_end(r);
  if (keys.empty()) throw Malformed{"a wait for no keys"};
  c.pending =
      PendingRequest{op, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms)};
  try_complete(c);
}

void StoreServer::Impl::handle_add(Connection& c, wire::Reader& r) {
  std::string key(r.bytes(kMaxKeyBytes));
  auto delta = static_cast<int64_t>(r.u64());
  require_end(r);
  int64_t current = 0;
  if (auto it = data.find(key); it != data.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed) {
      reply(c, Status::kError,
            fmt::format("rendezvous: key '{}' holds a value that is not a counter; use another "
                        "key for add()",
                        key));
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
}

void StoreServer::Impl::handle_check(Connection& c, wire::Reader& r) {
  std::vector<std::string> keys = read_keys(r);
  require_end(r);
  bool all = true;
  for (const auto& key : keys) all = all && has(key);
  reply(c, Status::kOk, wire::Writer().u8(all ? 1 : 0).take());
}

void StoreServer::Impl::handle_delete(Connection& c, wire::Reader& r) {
  std::string key(r.bytes(kMaxKeyBytes));
  require_end(r);
  bool existed = data.erase(key) > 0;
  reply(c, Status::kOk, wire::Writer().u8(existed ? 1 : 0).take());
}

}  // namespace lockstep::rendezvous
