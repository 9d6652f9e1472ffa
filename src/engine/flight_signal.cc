#include "engine/flight_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/base/log.h"
#include "lockstep/base/mutex.h"

namespace lockstep::engine::detail {
namespace {

int g_pipe[2] = {-1, -1};  // written by the handler, read by the dump thread

void on_sigusr1(int) {
  int saved = errno;
  char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &byte, 1);
  errno = saved;
}

struct Registry {
  Mutex mu;
  std::vector<std::weak_ptr<FlightRecorder>> recorders LOCKSTEP_GUARDED_BY(mu);

  void dump_all() {
    std::vector<std::shared_ptr<FlightRecorder>> live;
    {
      MutexLock lock(mu);
      std::erase_if(recorders, [](const auto& w) { return w.expired(); });
      for (const auto& w : recorders)
        if (auto r = w.lock()) live.push_back(std::move(r));
    }
    // Each SIGUSR1 is its own reason, so repeated signals dump again.
    static int count = 0;
    ++count;
    for (const auto& r : live) r->dump("SIGUSR1 #" + std::to_string(count), /*failure=*/false);
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the dump thread outlives main
  return *r;
}

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    ::sigaction(SIGUSR1, nullptr, &current);
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) {
      log(LogLevel::kInfo,
          "flight recorder: SIGUSR1 has a handler already; dumps happen on "
          "failures only");
      return;
    }
    if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    ::fcntl(g_pipe[0], F_SETFL, 0);  // the reader blocks
    std::thread([] {
      char buf[64];
      for (;;) {
        ssize_t n = ::read(g_pipe[0], buf, sizeof buf);
        if (n > 0)
          registry().dump_all();
        else if (n < 0 && errno != EINTR)
          return;
      }
    }).detach();
    struct sigaction action {};
    action.sa_handler = on_sigusr1;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &action, nullptr);
  });
}

}  // namespace

std::shared_ptr<FlightRecorder> make_flight_recorder(const EngineConfig& config,
                                                     const comm::WorldInfo& world) {
  FlightIdentity identity{
      world.rank, world.size, world.job_id,
      config.flight_dir.empty() ? default_flight_dir(world.job_id) : config.flight_dir};
  auto recorder = std::make_shared<FlightRecorder>(config.flight_recorder, std::move(identity));
  if (!recorder->enabled()) return recorder;
  install_handler_once();
  Registry& reg = registry();
  MutexLock lock(reg.mu);
  reg.recorders.push_back(recorder);
  return recorder;
}

}  // namespace lockstep::engine::detail
