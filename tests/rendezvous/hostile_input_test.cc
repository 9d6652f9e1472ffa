// The store survives garbage, truncation, oversized lengths, forgeries and
// replays: each closes only the offending connection.
#include <sys/socket.h>

#include <random>
#include <thread>
#include <string>

#include <gtest/gtest.h>

#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
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
    o.handshake_timeout = 500ms;
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
  EXPECT_TRUE(closed_by_server(c));  // within the 500 ms handshake timeout
  expect_still_serving();
}

// docs/rendezvous.md once said a client more than one frame ahead is
// disconnected, while the server answered three pipelined frames. The server
// is right (pipelining is bounded by memory, not by a frame count): it answers
// them one at a time, in order.
TEST_F(HostileInputTest, PipelinedFramesAreAnsweredInOrder) {
  auto c = raw_connect(server_);
  std::string burst = authentic(c, 0, wire::Writer().u8(1).bytes("p").bytes("1").take()) +
                      authentic(c, 1, wire::Writer().u8(3).bytes("n").u64(5).take()) +
                      authentic(c, 2, wire::Writer().u8(2).bytes("p").u32(1000).take());
  send_raw(c, burst);
  std::vector<std::string> bodies;
  auto deadline = net::Clock::now() + 5s;
  for (uint64_t seq = 0; seq < 3; ++seq) {
    char length[4];
    ASSERT_TRUE(net::read_exact(c.fd.get(), length, 4, deadline, "reply"));
    std::string rest(wire::load_u32(length) + wire::kMacBytes, '\0');
    ASSERT_TRUE(net::read_exact(c.fd.get(), rest.data(), rest.size(), deadline, "reply"));
    std::string body = rest.substr(0, rest.size() - wire::kMacBytes);
    EXPECT_TRUE(
        wire::mac_matches(wire::mac(secret_, c.nonce, wire::Direction::kToClient, seq, body),
                          std::string_view(rest).substr(body.size())));
    bodies.push_back(body);
  }
  EXPECT_EQ(bodies[0], std::string(1, '\0'));                                     // SET ok
  EXPECT_EQ(bodies[1], std::string(1, '\0') + wire::Writer().u64(5).take());      // ADD -> 5
  EXPECT_EQ(bodies[2], std::string(1, '\0') + wire::Writer().bytes("1").take());  // GET -> "1"
  EXPECT_EQ(server_.refused_connections(), 0u);
}

TEST_F(HostileInputTest, FirstFrameOverTheUnauthenticatedLimitIsRefusedAtItsLength) {
  auto c = raw_connect(server_);
  send_raw(c, wire::Writer().u32(wire::kMaxFirstBodyBytes + 1).take());
  EXPECT_TRUE(closed_by_server(c));
  EXPECT_EQ(server_.refused_connections(), 1u);
  // Within the limit, a first frame may be any request.
  auto d = raw_connect(server_);
  std::string set = wire::Writer().u8(1).bytes("k").bytes(std::string(8000, 'v')).take();
  send_raw(d, authentic(d, 0, set));
  expect_still_serving();
  EXPECT_EQ(StoreClient(server_.address(), secret_).get("k", 1s), std::string(8000, 'v'));
}

// Before clients authenticated while connecting, one that waited longer than
// the handshake timeout before its first request was dropped by the server.
TEST_F(HostileInputTest, ClientIdleBeyondTheHandshakeTimeoutStaysConnected) {
  StoreClient c(server_.address(), secret_);
  std::this_thread::sleep_for(800ms);  // the fixture's handshake timeout is 500 ms
  c.set("late", "fine");
  EXPECT_EQ(c.get("late", 1s), "fine");
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
