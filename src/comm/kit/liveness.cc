#include "comm/kit/liveness.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "lockstep/base/knobs.h"

namespace lockstep::comm::kit {
namespace {

constexpr int kGone = -2;  // pidfd_open said ESRCH: the peer died before we looked

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0 && errno == ESRCH) return kGone;
  return fd;
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

PeerLiveness::PeerLiveness(std::vector<int> pids, int self)
    : pids_(std::move(pids)), pidfds_(pids_.size(), -1) {
  if (self >= 0 && self < static_cast<int>(pids_.size())) pids_[self] = 0;
  for (size_t r = 0; r < pids_.size(); ++r)
    if (pids_[r] > 0) pidfds_[r] = open_pidfd(pids_[r]);
}

PeerLiveness::~PeerLiveness() { close_all(); }

PeerLiveness::PeerLiveness(PeerLiveness&& other) noexcept
    : pids_(std::move(other.pids_)), pidfds_(std::move(other.pidfds_)) {
  other.pids_.clear();
  other.pidfds_.clear();
}

PeerLiveness& PeerLiveness::operator=(PeerLiveness&& other) noexcept {
  if (this != &other) {
    close_all();
    pids_ = std::exchange(other.pids_, {});
    pidfds_ = std::exchange(other.pidfds_, {});
  }
  return *this;
}

void PeerLiveness::close_all() {
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
  pidfds_.clear();
}

bool PeerLiveness::watched(int r) const {
  return r >= 0 && r < static_cast<int>(pids_.size()) && pids_[r] > 0;
}

bool PeerLiveness::alive(int r) const {
  if (!watched(r)) return true;
  if (pidfds_[r] == kGone) return false;
  if (pidfds_[r] >= 0) {
    pollfd p{pidfds_[r], POLLIN, 0};
    return ::poll(&p, 1, 0) <= 0;
  }
  return !(kill(pids_[r], 0) != 0 && errno == ESRCH);
}

int PeerLiveness::find_dead() const {
  for (int r = 0; r < static_cast<int>(pids_.size()); ++r)
    if (!alive(r)) return r;
  return -1;
}

}  // namespace lockstep::comm::kit
