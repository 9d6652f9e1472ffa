// The rendezvous wire format (docs/rendezvous.md): framing, MACs and the
// bounds-checked readers both ends use. Internal to src/rendezvous.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::rendezvous::wire {

inline constexpr std::string_view kMagic = "LSRV";
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kHelloBytes = 8 + kNonceBytes;  // magic, version, 3 zero bytes, nonce
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kLengthBytes = 4;
// The largest body: a SET of the largest key and value, plus field headers.
inline constexpr size_t kMaxBodyBytes = (64u << 20) + (8u << 10);
// The largest body of a connection's first frame, which the server must buffer
// before it can check the MAC: a GET of the longest key fits, and a
// connection that has not proved it holds the secret can make the server
// hold no more than this.
inline constexpr size_t kMaxFirstBodyBytes = 8u << 10;
// Instead of a frame length, the server's last word before closing a
// connection it will not serve (never a valid length: both exceed
// kMaxBodyBytes). Unauthenticated, so a client only ever treats it as a
// refusal, never as data.
inline constexpr uint32_t kRefusedBadSecret = 0xffffffffu;
inline constexpr uint32_t kRefusedTooManyClients = 0xfffffffeu;

// kHello has no fields: a client sends it right after the greeting so the
// connection is authenticated before its first real (possibly large) request.
enum class Op : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kDelete = 6,
  kHello = 7
};
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };
// Distinguishes the two directions so a server message cannot be replayed as a
// client one.
enum class Direction : uint8_t { kToServer = 'C', kToClient = 'S' };

std::string make_hello(std::string_view nonce);
// The nonce of a valid hello, or nullopt.
std::optional<std::string> parse_hello(std::string_view hello);

std::string mac(std::string_view secret, std::string_view nonce, Direction direction,
                uint64_t sequence, std::string_view body);
// length | body | mac
std::string frame(std::string_view secret, std::string_view nonce, Direction direction,
                  uint64_t sequence, std::string_view body);
bool mac_matches(std::string_view expected, std::string_view received);

uint32_t load_u32(const char* p);

// Appends big-endian fields.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& bytes(std::string_view v);  // u32 length + bytes
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads big-endian fields; every read checks bounds and sets failed() instead
// of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  std::string_view bytes(size_t max_length);  // fails when longer than max_length
  bool failed() const { return failed_; }
  bool at_end() const { return !failed_ && in_.empty(); }

 private:
  bool take(size_t n, std::string_view& out);
  std::string_view in_;
  bool failed_ = false;
};

}  // namespace lockstep::rendezvous::wire
