#include "comm/transport/gloo/gloo_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <gloo/barrier.h>
#include <gloo/allgather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include "comm/kit/wait_policy.h"
#include "comm/transport/gloo/gloo_comm.h"
#include "comm/transport/gloo/gloo_store.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/mutex.h"

namespace lockstep::comm::gloo_transport {
namespace {

// Slot space of point-to-point messages, above any collective's slots
// (Gloo builds those from an 8-bit prefix in the top byte and the tag).
constexpr uint64_t kP2pSlotBase = 0xF0ull << 56;

struct P2pHeader {
  int64_t tag;
  uint64_t bytes;
};

// Writing to a socket whose peer died raises SIGPIPE, whose default action
// kills this process before Gloo can report EPIPE (measured: the 3-rank
// SIGKILL test lost a survivor to it). Ignore it unless the program installed
// its own handler.
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

// This host's address on the route to the launcher's rendezvous store: the
// network every rank of the job can reach. (The host name is a poor default:
// Debian maps it to 127.0.1.1, and network namespaces share it.) "" when the
// store is not a TCP address.
std::string address_towards_rendezvous() {
  std::string rendezvous = knob_string("LOCKSTEP_RENDEZVOUS");
  auto colon = rendezvous.rfind(':');
  if (rendezvous.empty() || colon == std::string::npos) return "";
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9);
  if (::inet_pton(AF_INET, rendezvous.substr(0, colon).c_str(), &peer.sin_addr) != 1) return "";
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string result;
  sockaddr_in local{};
  socklen_t len = sizeof local;
  char text[INET_ADDRSTRLEN] = {};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
      ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
    result = text;
  ::close(fd);
  return result;
}

// One TCP device (and its event-loop thread) per process and interface.
struct DeviceCache {
  Mutex mu;
  std::shared_ptr<::gloo::transport::Device> dev LOCKSTEP_GUARDED_BY(mu);
  std::string iface LOCKSTEP_GUARDED_BY(mu);  // what dev was opened for
};

std::shared_ptr<::gloo::transport::Device> device() {
  static DeviceCache cache;
  MutexLock lock(cache.mu);
  auto& dev = cache.dev;
  ignore_sigpipe();
  std::string iface = knob_string("LOCKSTEP_NETWORK_INTERFACE");
  if (dev && cache.iface == iface) return dev;
  ::gloo::transport::tcp::attr attr;
  std::string towards_store = iface.empty() ? address_towards_rendezvous() : "";
  if (!iface.empty()) {
    attr.iface = iface;
  } else if (!towards_store.empty()) {
    attr.hostname = towards_store;
  } else {
    attr.hostname = host_name();
  }
  try {
    dev = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw InvalidArgument(fmt::format(
        "gloo backend: cannot open a TCP device on {} ({}); set LOCKSTEP_NETWORK_INTERFACE (or "
        "lockstep run --network-interface) to an interface that exists, e.g. eth0",
        !iface.empty()          ? "interface " + iface
        : towards_store.empty() ? std::string("the address of this host's name")
                                : "address " + towards_store,
        e.what()));
  }
  cache.iface = iface;
  return dev;
}

// Pids of the peers on this host (same host label), 0 for the others.
std::vector<int> local_pids(const std::vector<PeerInfo>& peers) {
  std::string host = host_label();
  std::vector<int> pids(peers.size(), 0);
  for (size_t r = 0; r < peers.size(); ++r)
    if (peers[r].host == host) pids[r] = peers[r].pid;
  return pids;
}

std::vector<PeerInfo> exchange_peers(::gloo::rendezvous::Store& store, const WorldInfo& world,
                                     std::chrono::milliseconds timeout) {
  std::string mine = fmt::format("{}\n{}", host_label(), getpid());
  store.set(fmt::format("peer/{}", world.rank), std::vector<char>(mine.begin(), mine.end()));
  std::vector<PeerInfo> peers(world.size);
  for (int r = 0; r < world.size; ++r) {
    std::string key = fmt::format("peer/{}", r);
    store.wait({key}, timeout);
    std::vector<char> v = store.get(key);
    std::string s(v.begin(), v.end());
    size_t nl = s.find('\n');
    peers[r].host = s.substr(0, nl);
    peers[r].pid = nl == std::string::npos ? 0 : std::atoi(s.c_str() + nl + 1);
  }
  return peers;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag) {
  auto timeout = kit::WaitPolicy::from_knobs(world.local_size).timeout;
  auto store = make_store(world, tag, timeout);
  std::vector<PeerInfo> peers;
  auto context = std::make_shared<::gloo::rendezvous::Context>(world.rank, world.size);
  context->setTimeout(timeout);
  try {
    peers = exchange_peers(*store, world, timeout);
    auto dev = device();
    context->connectFullMesh(*store, dev);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerFailure(
        -1,
        fmt::format(
            "gloo backend: rank {} of {} could not connect to its peers within {} s ({}). Check that "
            "every rank started and that LOCKSTEP_NETWORK_INTERFACE names a reachable interface",
            world.rank, world.size, timeout.count() / 1000.0, e.what()));
  }
  return std::make_unique<GlooBackend>(std::move(context), std::move(store), std::move(peers),
                                       timeout, knob_bool("LOCKSTEP_VERIFY_OPS"));
}

GlooBackend::GlooBackend(std::shared_ptr<::gloo::Context> context,
                         std::unique_ptr<::gloo::rendezvous::Store> store,
                         std::vector<PeerInfo> peers, std::chrono::milliseconds timeout,
                         bool verify_ops)
    : context_(std::move(context)),
      store_(std::move(store)),
      peers_(std::move(peers)),
      liveness_(local_pids(peers_), context_->rank),
      timeout_(timeout),
      verify_ops_(verify_ops),
      rank_(context_->rank),
      size_(context_->size),
      sent_(size_, 0),
      received_(size_, 0) {}

GlooBackend::~GlooBackend() {
  if (!broken_.empty() || size_ == 1) return;
  try {
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(++tag_);
    opts.setTimeout(std::min(timeout_, std::chrono::milliseconds(10'000)));
    ::gloo::barrier(opts);
  } catch (const std::exception&) {
    // A peer is already gone; nothing left to protect.
  }
}

void GlooBackend::check_usable() const {
  if (!broken_.empty())
    throw Aborted("this gloo communicator was aborted by an earlier error (" + broken_ +
                  "); create a new one or exit");
}

void GlooBackend::begin(const kit::OpDesc& desc) {
  check_usable();
  ++seq_;
  ++tag_;
  if (!verify_ops_ || size_ == 1) return;
  kit::PackedDesc mine = kit::pack(desc);
  std::vector<kit::PackedDesc> words(size_);
  allgather_raw(mine.data(), words.data(), sizeof mine);
  ++tag_;
  std::vector<kit::OpDesc> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = kit::unpack(words[r]);
  // Every rank saw the same table, so every rank throws here together and
  // the communicator stays usable.
  if (!kit::all_equal(all)) throw MismatchError(kit::mismatch_message(all));
}

void GlooBackend::barrier() {
  begin(kit::barrier_desc());
  if (size_ == 1) return;
  guarded("barrier", [&] {
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::barrier(opts);
  });
}

uint64_t GlooBackend::p2p_slot(int peer, bool sending) {
  // Messages between a pair match in order: the n-th send from A to B uses
  // the same slot as B's n-th receive from A. Two slots per message (header,
  // payload); the sender's rank keeps A->B and B->A apart.
  uint64_t n = sending ? sent_[peer]++ : received_[peer]++;
  uint64_t from = sending ? rank_ : peer;
  return kP2pSlotBase | (from << 40) | (n * 2);
}

void GlooBackend::send(const void* buffer, size_t count, DataType dtype, int peer, int tag) {
  check_usable();
  size_t bytes = count * dtype_size(dtype);
  uint64_t slot = p2p_slot(peer, true);
  guarded("send", [&] {
    P2pHeader h{tag, bytes};
    auto header = context_->createUnboundBuffer(&h, sizeof h);
    header->send(peer, slot);
    if (bytes) {
      auto payload = context_->createUnboundBuffer(const_cast<void*>(buffer), bytes);
      payload->send(peer, slot + 1);
      payload->waitSend(timeout_);
    }
    header->waitSend(timeout_);
  });
}

void GlooBackend::recv(void* buffer, size_t count, DataType dtype, int peer, int tag) {
  check_usable();
  size_t bytes = count * dtype_size(dtype);
  uint64_t slot = p2p_slot(peer, false);
  P2pHeader h{};
  guarded("recv", [&] {
    auto header = context_->createUnboundBuffer(&h, sizeof h);
    header->recv(peer, slot);
    header->waitRecv(timeout_);
  });
  bool match = h.tag == tag && h.bytes == bytes;
  std::vector<std::byte> discard;
  if (!match) discard.resize(h.bytes);  // drain it so the pair stays in step
  if (h.bytes) {
    guarded("recv", [&] {
      auto payload = context_->createUnboundBuffer(match ? buffer : discard.data(), h.bytes);
      payload->recv(peer, slot + 1);
      payload->waitRecv(timeout_);
    });
  }
  if (!match)
    throw MismatchError(fmt::format(
        "recv from rank {}: expected tag {} and {} bytes, but rank {} sent tag {} with {} bytes "
        "(sends and receives between a pair must match in order)",
        peer, tag, bytes, peer, h.tag, h.bytes));
}

}  // namespace lockstep::comm::gloo_transport
