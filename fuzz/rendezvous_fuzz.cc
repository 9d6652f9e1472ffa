// The rendezvous store faces the network. Each input is sent to a live
// StoreServer over TCP, either raw (the first byte is odd: probes framing and
// authentication) or as messages framed with the job's secret (even: probes
// the request parser behind the MAC; each message is a length byte and that
// many body bytes). Every 32 inputs a real client must still be served, so a
// wedged or crashed server fails the run.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
#include "rendezvous/wire.h"

namespace {

namespace rz = lockstep::rendezvous;
const std::string kSecret(rz::kSecretBytes, 's');

rz::StoreServer& server() {
  static std::unique_ptr<rz::StoreServer> s = [] {
    rz::StoreServer::Options o;
    o.secret = kSecret;
    o.handshake_timeout = std::chrono::milliseconds(500);
    o.log_prefix = "fuzz: ";
    auto made = std::make_unique<rz::StoreServer>(o);
    made->start();
    return made;
  }();
  return *s;
}

std::string payload_of(const uint8_t* data, size_t size, const std::string& nonce) {
  std::string out;
  if (data[0] & 1) return std::string(reinterpret_cast<const char*>(data + 1), size - 1);
  uint64_t sequence = 0;
  for (size_t i = 1; i < size;) {
    size_t n = std::min<size_t>(data[i], size - i - 1);
    std::string_view body(reinterpret_cast<const char*>(data + i + 1), n);
    out += rz::wire::frame(kSecret, nonce, rz::wire::Direction::kToServer, sequence++, body);
    i += 1 + n;
  }
  return out;
}

// Sends, then drains replies briefly (WAITs may park the connection).
void exchange(const uint8_t* data, size_t size) {
  auto deadline = lockstep::net::Clock::now() + std::chrono::seconds(2);
  lockstep::net::Fd fd =
      lockstep::net::connect_tcp(lockstep::net::parse_address(server().address()), deadline);
  std::string hello(rz::wire::kHelloBytes, '\0');
  if (!lockstep::net::read_exact(fd.get(), hello.data(), hello.size(), deadline, "hello")) return;
  auto nonce = rz::wire::parse_hello(hello);
  if (!nonce) __builtin_trap();
  std::string bytes = payload_of(data, size, *nonce);
  ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd.get(), SHUT_WR);
  char sink[4096];
  pollfd p{fd.get(), POLLIN, 0};
  while (::poll(&p, 1, 2) > 0 && ::recv(fd.get(), sink, sizeof sink, 0) > 0) {
  }
}

void check_still_serving() {
  rz::StoreClient client(server().address(), kSecret);
  client.set("fuzz/alive", "yes");
  if (client.get("fuzz/alive", std::chrono::milliseconds(1000)) != "yes") __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  if (size == 0 || size > (1u << 16)) return 0;
  try {
    exchange(data, size);
  } catch (const lockstep::Error&) {
    // The server may close first; only its staying alive matters.
  }
  if (++runs % 32 == 0) check_still_serving();
  return 0;
}
