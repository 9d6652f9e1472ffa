// Hostile clients without the secret cannot make the store hold much memory
// or keep honest clients out (docs/rendezvous.md, "Admission"). The server
// runs in a child process so its resident memory and open descriptors can be
// read from /proc while the test attacks it.
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
#include "rendezvous/wire.h"

namespace lockstep::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Raises the soft descriptor limit as far as allowed; returns it.
size_t raise_fd_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

class ServerProcess {
 public:
  explicit ServerProcess(const std::string& secret) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      raise_fd_limit();
      StoreServer::Options o;
      o.secret = secret;
      o.log_prefix = "admission_test server: ";
      StoreServer server(o);
      server.start();
      uint16_t port = server.port();
      if (write(fds[1], &port, sizeof port) != sizeof port) _exit(1);
      for (;;) pause();  // until SIGKILL
    }
    close(fds[1]);
    EXPECT_EQ(read(fds[0], &port_, sizeof port_), static_cast<ssize_t>(sizeof port_));
    close(fds[0]);
  }
  ~ServerProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }

  // A field of /proc/PID/status in KiB (VmRSS, VmHWM).
  size_t status_kib(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
    ADD_FAILURE() << "no " << field << " in /proc/" << pid_ << "/status";
    return 0;
  }
  size_t open_fds() const {
    size_t n = 0;
    for ([[maybe_unused]] auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/fd"))
      ++n;
    return n;
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// A connection that is started and never spoken on (non-blocking connect).
net::Fd idle_connection(uint16_t port) {
  net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  return fd;
}

// Seconds an honest client needs to connect, set and read back a key.
double serve_honest_client(const ServerProcess& server, const std::string& secret, int i) {
  auto start = Clock::now();
  StoreClient client(server.address(), secret);
  std::string key = "honest/" + std::to_string(i);
  client.set(key, "served");
  EXPECT_EQ(client.get(key, 1s), "served");
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class Admission : public ::testing::Test {
 protected:
  Admission() : secret_(decode_secret_hex(random_secret_hex())), server_(secret_) {}
  std::string secret_;
  ServerProcess server_;
};

// The bug: the store buffered a whole frame body (up to 64 MiB) before
// checking its MAC, so six unauthenticated connections grew the launcher from
// 11 MiB to 403 MiB.
TEST_F(Admission, UnauthenticatedFramesCannotAmplifyServerMemory) {
  serve_honest_client(server_, secret_, 0);  // warm: the server's own buffers exist
  const size_t baseline = server_.status_kib("VmRSS");
  std::vector<net::Fd> attackers;
  std::string garbage(1 << 20, 'x');
  for (int i = 0; i < 32; ++i) {
    auto c = net::connect_tcp(net::parse_address(server_.address()), Clock::now() + 5s);
    // A 64 MiB frame (valid before) followed by 1 MiB of its body; then one
    // within the first-frame limit that never completes.
    uint32_t length = i % 2 ? 64u << 20 : wire::kMaxFirstBodyBytes;
    std::string head = wire::Writer().u32(length).take();
    ::send(c.get(), head.data(), head.size(), MSG_NOSIGNAL);
    ::send(c.get(), garbage.data(), std::min<size_t>(garbage.size(), length - 1),
           MSG_NOSIGNAL | MSG_DONTWAIT);
    attackers.push_back(std::move(c));
  }
  double seconds = serve_honest_client(server_, secret_, 1);
  const size_t peak = server_.status_kib("VmHWM");
  std::printf(
      "server RSS: %zu KiB before the attack, peak %zu KiB; honest client served in %.3f s\n",
      baseline, peak, seconds);
  // 32 connections × 1 MiB would be 32 MiB if bodies were buffered.
  EXPECT_LT(peak, baseline + 8 * 1024) << "unauthenticated bytes were buffered";
  EXPECT_LT(seconds, 1.0);
}

// The bug: 1100 idle connections (no bytes) filled the store's 1024 slots and
// the kernel's accept queue, so a client with the right secret timed out for
// as long as an attacker kept reconnecting.
TEST_F(Admission, IdleConnectionFloodDoesNotLockOutClients) {
  const size_t fd_limit = raise_fd_limit();
  const size_t flood = std::min<size_t>(1100, fd_limit > 200 ? fd_limit - 100 : 0);
  ASSERT_GE(flood, 500u) << "RLIMIT_NOFILE too low for the flood (" << fd_limit << ")";
  std::deque<net::Fd> idle;
  for (size_t i = 0; i < flood; ++i) idle.push_back(idle_connection(server_.port()));
  double worst = 0;
  worst = std::max(worst, serve_honest_client(server_, secret_, 0));

  // Now keep reconnecting, as an attacker would, while honest clients come.
  std::atomic<bool> stop{false};
  std::atomic<size_t> reconnects{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      idle.pop_front();
      idle.push_back(idle_connection(server_.port()));
      reconnects.fetch_add(1);
      if (reconnects.load() % 64 == 0) std::this_thread::sleep_for(1ms);  // leave a core
    }
  });
  for (int i = 1; i <= 10; ++i) {
    std::this_thread::sleep_for(100ms);  // let the attacker cycle the server's slots
    worst = std::max(worst, serve_honest_client(server_, secret_, i));
  }
  size_t server_fds = server_.open_fds();
  size_t rss = server_.status_kib("VmHWM");
  stop.store(true);
  attacker.join();
  std::printf(
      "flood of %zu idle connections, %zu reconnects: slowest honest client %.3f s; "
      "server holds %zu descriptors, peak RSS %zu KiB\n",
      flood, reconnects.load(), worst, server_fds, rss);
  EXPECT_LT(worst, 1.0);
  // 256 unauthenticated + the few honest ones + listener, eventfd, stdio.
  EXPECT_LT(server_fds, 300u);
}

}  // namespace
}  // namespace lockstep::rendezvous
