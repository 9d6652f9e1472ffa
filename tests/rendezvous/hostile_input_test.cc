// The store survives garbage, truncation, oversized lengths, forgeries and
// replays: each closes only the offending connection.
#include <sys/socket.h>

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "lockstep/rendezvous/store.h"
#include "rendezvous/socket.h"
#include "rendezvous/wire.h"

namespace lockstep::rendezvous {
namespace {

using namespace std::chrono_literals;

struct RawConnection {
  net::Fd fd;
  std::string nonce;
};

RawConnection raw_connect(const StoreServer& server) {
  auto deadline = net::Clock::now() + 5s;
  RawConnection c{net::connect_tcp(net::parse_address(server.address()), deadline), {}};
  std::string hello(wire::kHelloBytes, '\0');
  EXPECT_TRUE(net::read_exact(c.fd.get(), hello.data(), hello.size(), deadline, "hello"));
  c.nonce = wire::parse_hello(hello).value_or("");
  return c;
}

void send_raw(const RawConnection& c, const std::string& bytes) {
  // The server may close mid-send; that is the point of some inputs.
  ::send(c.fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

// True when the server closed the connection (EOF or reset) before deadline.
bool closed_by_server(const RawConnection& c) {
  char buf[256];
  auto deadline = net::Clock::now() + 5s;
  try {
    while (net::read_exact(c.fd.get(), buf, 1, deadline, "waiting for close")) {
    }
    return true;
  } catch (const std::exception&) {
    return errno == ECONNRESET;
  }
}

class HostileInputTest : public ::testing::Test {
 protected:
  HostileInputTest() : secret_(decode_secret_hex(random_secret_hex())), server_(make_options()) {
    server_.start();
  }
  StoreServer::Options make_options() {
    StoreServer::Options o;
    o.secret = secret_;
    o.log_prefix = "hostile_input_test: ";
    o.handshake_timeout = 2s;
    return o;
  }
  std::string authentic(const RawConnection& c, uint64_t seq, const std::string& body) {
    return wire::frame(secret_, c.nonce, wire::Direction::kToServer, seq, body);
  }
  void expect_still_serving() {
    StoreClient c(server_.address(), secret_);
    c.set("alive", "yes");
    EXPECT_EQ(c.get("alive", 1s), "yes");
  }

  std::string secret_;
  StoreServer server_;
};

TEST_F(HostileInputTest, ForgedMacIsRefused) {
  auto c = raw_connect(server_);
  std::string body = wire::Writer().u8(1).bytes("k").bytes("v").take();
  send_raw(c, wire::frame("not the secret", c.nonce, wire::Direction::kToServer, 0, body));
  EXPECT_TRUE(closed_by_server(c));
  EXPECT_EQ(server_.refused_connections(), 1u);
  expect_still_serving();
}

TEST_F(HostileInputTest, ReplayOnAnotherConnectionOrTwiceIsRefused) {
  std::string body = wire::Writer().u8(1).bytes("k").bytes("v").take();
  auto first = raw_connect(server_);
  std::string message = authentic(first, 0, body);
  send_raw(first, message);
  auto second = raw_connect(server_);
  send_raw(second, message);  // other nonce
  EXPECT_TRUE(closed_by_server(second));
  send_raw(first, message);  // same nonce, stale sequence number
  EXPECT_TRUE(closed_by_server(first));
  EXPECT_EQ(server_.refused_connections(), 2u);
  expect_still_serving();
}

TEST_F(HostileInputTest, OversizedLengthIsRefusedBeforeReadingTheBody) {
  auto c = raw_connect(server_);
  send_raw(c, wire::Writer().u32(0xffffffffu).take());
  EXPECT_TRUE(closed_by_server(c));
  expect_still_serving();
}

TEST_F(HostileInputTest, SilentConnectionIsDroppedAfterTheHandshakeTimeout) {
  auto c = raw_connect(server_);
  EXPECT_TRUE(closed_by_server(c));  // within the 2 s handshake timeout
  expect_still_serving();
}

TEST_F(HostileInputTest, FixedSeedFuzzNeverCrashesTheServer) {
  std::mt19937_64 rng(20261122);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng());
    return s;
  };
  for (int i = 0; i < 300; ++i) {
    auto c = raw_connect(server_);
    std::string body = random_bytes(rng() % 64);
    switch (i % 5) {
      case 0:  // pure noise
        send_raw(c, random_bytes(rng() % 512));
        break;
      case 1:  // plausible length, forged MAC
        send_raw(c, wire::Writer().u32(body.size()).take() + body + random_bytes(32));
        break;
      case 2:  // authentic frame cut short
        send_raw(c, authentic(c, 0, body).substr(0, rng() % (body.size() + 36)));
        break;
      case 3: {  // authentic frame whose body is noise behind a real op code
        body.insert(body.begin(), static_cast<char>(1 + rng() % 7));
        send_raw(c, authentic(c, 0, body));
        break;
      }
      case 4: {  // authentic request whose field lengths lie
        std::string lying = wire::Writer().u8(1).u32(rng() % 100000).take() + body;
        send_raw(c, authentic(c, 0, lying));
        break;
      }
    }
  }
  expect_still_serving();
  EXPECT_GT(server_.refused_connections(), 100u);
}

}  // namespace
}  // namespace lockstep::rendezvous
