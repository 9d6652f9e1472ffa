// Turning Gloo's exceptions into lockstep's errors, naming the peer.

#include <cctype>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "comm/transport/gloo/gloo_comm.h"
#include "lockstep/base/error.h"

namespace lockstep::comm::gloo_transport {
namespace {

using Clock = std::chrono::steady_clock;

bool is_timeout(std::string message) {
  for (char& c : message) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return message.find("timed out") != std::string::npos ||
         message.find("timeout") != std::string::npos;
}

}  // namespace

int GlooBackend::find_dead_peer(std::chrono::milliseconds grace) const {
  // The socket may report the close a moment before the process is reaped.
  auto until = Clock::now() + grace;
  do {
    if (int dead = liveness_.find_dead(); dead >= 0) return dead;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < until);
  return -1;
}

// Ranks that did not report being at this collective within a short grace
// period, through the store: every rank that times out posts its sequence
// number, so the ones missing are those stuck elsewhere.
std::string GlooBackend::laggards() {
  std::string key = fmt::format("late/{}/", seq_);
  std::string names;
  try {
    store_->set(key + std::to_string(rank_), {'1'});
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      try {
        store_->wait({key + std::to_string(r)}, std::chrono::milliseconds(1500));
      } catch (const std::exception&) {
        names += fmt::format(" rank {},", r);
      }
    }
  } catch (const std::exception&) {
    return "";
  }
  if (!names.empty()) names.pop_back();
  return names;
}

void GlooBackend::fail(const char* what, const std::string& gloo_message) {
  std::string msg;
  if (is_timeout(gloo_message)) {
    std::string late = laggards();
    msg = fmt::format(
        "{}: rank {} waited {:.1f} s for{} (alive), which did not complete the operation "
        "(LOCKSTEP_TIMEOUT={} s; gloo: {}). Check that every rank calls the same collectives.",
        what, rank_, timeout_.count() / 1000.0, late.empty() ? " its peers" : late,
        timeout_.count() / 1000.0, gloo_message);
    broken_ = msg;
    context_.reset();  // closes every connection: the peers fail now, not at their deadline
    throw TimeoutError(msg);
  }
  int dead = find_dead_peer(std::chrono::milliseconds(500));
  if (dead >= 0)
    msg = fmt::format(
        "{}: rank {} (pid {}) died; rank {} cannot complete the collective "
        "(gloo: {})",
        what, dead, peers_[dead].pid, rank_, gloo_message);
  else
    msg = fmt::format(
        "{}: rank {} lost its connection to a peer (gloo: {}); that peer died, "
        "aborted its communicator or its host is unreachable",
        what, rank_, gloo_message);
  broken_ = msg;
  context_.reset();
  throw PeerFailure(dead, msg);
}

}  // namespace lockstep::comm::gloo_transport
