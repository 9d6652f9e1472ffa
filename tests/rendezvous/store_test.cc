// The rendezvous store's operations, across threads and processes.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::rendezvous {
namespace {

using namespace std::chrono_literals;

class StoreTest : public ::testing::Test {
 protected:
  StoreTest() : secret_(decode_secret_hex(random_secret_hex())), server_(options(secret_)) {
    server_.start();
  }
  static StoreServer::Options options(const std::string& secret) {
    StoreServer::Options o;
    o.secret = secret;
    o.log_prefix = "store_test: ";
    return o;
  }
  StoreClient client() { return StoreClient(server_.address(), secret_); }

  std::string secret_;
  StoreServer server_;
};

TEST_F(StoreTest, SecretIsThirtyTwoRandomBytesInHex) {
  std::string a = random_secret_hex(), b = random_secret_hex();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(decode_secret_hex(a).size(), kSecretBytes);
  EXPECT_THROW(decode_secret_hex("abc"), InvalidArgument);
  EXPECT_THROW(decode_secret_hex("zz"), InvalidArgument);
}

TEST_F(StoreTest, ServerListensOnLoopback) {
  EXPECT_EQ(server_.address(), "127.0.0.1:" + std::to_string(server_.port()));
  EXPECT_NE(server_.port(), 0);
}

TEST_F(StoreTest, SetThenGetReturnsTheBytes) {
  auto c = client();
  std::string binary("a\0b\xff\n", 5);
  c.set("key", binary);
  EXPECT_EQ(c.get("key", 1s), binary);
  c.set("key", "replaced");
  EXPECT_EQ(c.get("key", 1s), "replaced");
  c.set("empty", "");
  EXPECT_EQ(c.get("empty", 1s), "");
}

TEST_F(StoreTest, GetBlocksUntilAnotherClientSets) {
  std::string seen;
  std::thread waiter([&] { seen = client().get("late", 20s); });
  client().set("late", "here");
  waiter.join();
  EXPECT_EQ(seen, "here");
}

TEST_F(StoreTest, GetTimesOutNamingTheKeyAndTheConnectionStaysUsable) {
  auto c = client();
  try {
    c.get("never-set", 50ms);
    FAIL() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never-set"), std::string::npos) << e.what();
  }
  c.set("after", "1");
  EXPECT_EQ(c.get("after", 1s), "1");
}

TEST_F(StoreTest, AddCountsAndGetReadsTheCounterAsText) {
  auto c = client();
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -2), 3);
  EXPECT_EQ(c.get("n", 1s), "3");
  c.set("text", "not a number");
  EXPECT_THROW(c.add("text", 1), Error);
  EXPECT_EQ(c.add("n", 0), 3);  // the connection survives a refused add
}

TEST_F(StoreTest, CheckWaitAndRemove) {
  auto c = client();
  std::vector<std::string> keys{"a", "b"};
  EXPECT_FALSE(c.check(keys));
  c.set("a", "1");
  EXPECT_FALSE(c.check(keys));
  EXPECT_THROW(c.wait(keys, 20ms), TimeoutError);
  std::thread setter([&] { client().set("b", "2"); });
  c.wait(keys, 20s);
  setter.join();
  EXPECT_TRUE(c.check(keys));
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  EXPECT_FALSE(c.check(keys));
}

TEST_F(StoreTest, ManyThreadsAddAtomicallyAndExchangeValues) {
  constexpr int kThreads = 8, kAdds = 50;
  std::vector<std::string> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto c = client();
      c.set("from" + std::to_string(t), "value" + std::to_string(t));
      for (int i = 0; i < kAdds; ++i) c.add("counter", 1);
      got[t] = c.get("from" + std::to_string((t + 1) % kThreads), 20s);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(got[t], "value" + std::to_string((t + 1) % kThreads));
  EXPECT_EQ(client().add("counter", 0), kThreads * kAdds);
}

// Not a fixture test: the children are forked before the server thread starts,
// since a child forked from a multi-threaded process may inherit held locks.
TEST(StoreProcesses, ProcessesShareTheStore) {
  constexpr int kProcs = 4, kAdds = 25;
  std::string secret = decode_secret_hex(random_secret_hex());
  StoreServer::Options options;
  options.secret = secret;
  StoreServer server(options);  // listening; connections queue until start()
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(60);  // a wedged child dies instead of hanging the test
      int code = 0;
      try {
        StoreClient c(server.address(), secret);
        for (int i = 0; i < kAdds; ++i) c.add("procs", 1);
        c.set("done" + std::to_string(p), "1");
        // Every process waits for all: a barrier through the store.
        std::vector<std::string> all;
        for (int q = 0; q < kProcs; ++q) all.push_back("done" + std::to_string(q));
        c.wait(all, 30s);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", p, e.what());
        code = 1;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  server.start();
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(StoreClient(server.address(), secret).add("procs", 0), kProcs * kAdds);
}

TEST_F(StoreTest, LargeValuesRoundTripAndOversizedOnesAreRefusedLocally) {
  auto c = client();
  std::string big(8 << 20, 'x');
  big[12345] = '\0';
  c.set("big", big);
  EXPECT_EQ(c.get("big", 5s), big);
  EXPECT_THROW(c.set("huge", std::string(kMaxValueBytes + 1, 'y')), InvalidArgument);
  EXPECT_THROW(c.set(std::string(kMaxKeyBytes + 1, 'k'), "v"), InvalidArgument);
}

TEST_F(StoreTest, WrongSecretIsRefusedAndTheServerStaysUp) {
  try {
    // Refused at once (not after retrying until connect_timeout): the client
    // authenticates while connecting.
    StoreClient intruder(server_.address(), decode_secret_hex(random_secret_hex()));
    intruder.set("k", "forged");
    FAIL() << "a client with the wrong secret was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_SECRET"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_.refused_connections(), 1u);
  auto c = client();
  EXPECT_FALSE(c.check(std::vector<std::string>{"k"}));  // the forged set did not land
  c.set("k", "real");
  EXPECT_EQ(c.get("k", 1s), "real");
}

TEST_F(StoreTest, ClientGivesUpConnectingAtItsDeadline) {
  StoreServer::Options o = options(secret_);
  uint16_t port;
  {
    StoreServer closed(o);  // bound, then gone: nobody listens on the port
    port = closed.port();
  }
  StoreClient::Options quick;
  quick.connect_timeout = 200ms;
  EXPECT_THROW(StoreClient("127.0.0.1:" + std::to_string(port), secret_, quick), Error);
}

TEST(StoreEnvironment, FromEnvironmentExplainsMissingVariables) {
  unsetenv("LOCKSTEP_RENDEZVOUS");
  unsetenv("LOCKSTEP_SECRET");
  try {
    StoreClient::from_environment();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lockstep run"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep::rendezvous
