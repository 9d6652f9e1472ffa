#include "comm/transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::comm::shm {
namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Layout {
  size_t ranks, counts, channels, slots, p2p, total;
  Layout(int n, size_t slot_bytes, size_t p2p_bytes) {
    size_t nn = static_cast<size_t>(n) * n;
    ranks = kPage;
    counts = round_up(ranks + sizeof(RankLine) * n, 128);
    channels = round_up(counts + 4 * nn * sizeof(uint64_t), 128);
    slots = round_up(channels + sizeof(Channel) * nn, kPage);
    p2p = round_up(slots + static_cast<size_t>(n) * 2 * slot_bytes, kPage);
    total = round_up(p2p + nn * 2 * p2p_bytes, kPage);
  }
};

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail_errno(const std::string& what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
}

int create_fd(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST)
    throw Error(fmt::format(
        "shared-memory segment /dev/shm{} already exists: another job uses the same "
        "LOCKSTEP_JOB_ID, or a crashed job left it behind (remove it)", name));
  if (fd < 0) fail_errno(fmt::format("shm_open({})", name));
  // Reserve the pages now: a full /dev/shm then fails here with a message
  // instead of SIGBUS in the middle of a collective.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw Error(fmt::format("cannot reserve {} bytes of /dev/shm for {}: {} (is /dev/shm full "
                            "or too small? lower LOCKSTEP_SHM_SLOT_BYTES)",
                            bytes, name, std::strerror(err)));
  }
  return fd;
}

// Waits for rank 0 to create and size the segment.
int attach_fd(const std::string& name, size_t bytes, Clock::time_point deadline) {
  for (;;) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes) return fd;
      if (st.st_size != 0 && static_cast<size_t>(st.st_size) != bytes) {
        close(fd);
        throw Error(fmt::format(
            "segment {} has {} bytes but this rank expects {}: ranks disagree on world size or "
            "LOCKSTEP_SHM_SLOT_BYTES", name, st.st_size, bytes));
      }
      close(fd);
    } else if (errno != ENOENT) {
      fail_errno(fmt::format("shm_open({})", name));
    }
    if (Clock::now() > deadline)
      throw TimeoutError(fmt::format("rank 0 never created shared-memory segment {} (is rank 0 "
                                     "running with the same LOCKSTEP_JOB_ID?)", name));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void init_header(std::byte* base, int size, size_t slot_bytes, size_t p2p_bytes,
                 size_t total) {
  auto* h = new (base) Header{};
  h->version = kVersion;
  h->size = static_cast<uint32_t>(size);
  h->slot_bytes = slot_bytes;
  h->p2p_bytes = p2p_bytes;
  h->total_bytes = total;
  h->abort_rank.store(-1);
  h->abort_dead_rank = -1;
  h->ready.store(0);
  h->attached.store(0);
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(kMagic, std::memory_order_release);
}

void wait_ready(Header& h, const std::string& name, Clock::time_point deadline) {
  auto* magic = reinterpret_cast<std::atomic<uint64_t>*>(&h.magic);
  while (magic->load(std::memory_order_acquire) != kMagic) {
    if (Clock::now() > deadline)
      throw TimeoutError(fmt::format("segment {} was never initialised by rank 0", name));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (h.version != kVersion)
    throw Error(fmt::format("segment {} has layout version {}, this build expects {}: all "
                            "workers must run the same lockstep build", name, h.version, kVersion));
}

}  // namespace

Segment::Segment(std::string name, std::byte* base, size_t bytes, int size, size_t slot_bytes,
                 size_t p2p_bytes)
    : name_(std::move(name)), base_(base), bytes_(bytes), size_(size), slot_bytes_(slot_bytes),
      p2p_bytes_(p2p_bytes) {
  Layout l(size, slot_bytes, p2p_bytes);
  ranks_ = reinterpret_cast<RankLine*>(base + l.ranks);
  counts_ = reinterpret_cast<uint64_t*>(base + l.counts);
  channels_ = reinterpret_cast<Channel*>(base + l.channels);
  slots_ = base + l.slots;
  p2p_ = base + l.p2p;
}

Segment::~Segment() { munmap(base_, bytes_); }

std::unique_ptr<Segment> Segment::open(const std::string& name, int rank, int size,
                                       size_t slot_bytes, size_t p2p_bytes, uint64_t policy,
                                       std::string_view policy_knobs,
                                       std::chrono::milliseconds timeout) {
  Layout layout(size, slot_bytes, p2p_bytes);
  auto deadline = Clock::now() + timeout;
  int fd = rank == 0 ? create_fd(name, layout.total) : attach_fd(name, layout.total, deadline);
  void* mem = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) fail_errno(fmt::format("mmap({})", name));
  auto* base = static_cast<std::byte*>(mem);
  if (rank == 0) {
    // Placement-new the shared objects; the pages are zero already.
    for (int r = 0; r < size; ++r) new (base + layout.ranks + r * sizeof(RankLine)) RankLine{};
    init_header(base, size, slot_bytes, p2p_bytes, layout.total);
  }
  std::unique_ptr<Segment> seg(new Segment(name, base, layout.total, size, slot_bytes, p2p_bytes));
  wait_ready(seg->header(), name, deadline);
  if (seg->header().size != static_cast<uint32_t>(size))
    throw Error(fmt::format("segment {} was created for {} ranks, this rank expects {}", name,
                            seg->header().size, size));
  RankLine& me = seg->rank_line(rank);
  me.pid.store(getpid());
  me.policy = policy;
  me.state.store(kAttached);
  seg->header().attached.fetch_add(1);
  while (seg->header().attached.load() < static_cast<uint32_t>(size)) {
    if (Clock::now() > deadline) {
      std::string missing;
      for (int r = 0; r < size; ++r)
        if (seg->rank_line(r).state.load() == kAbsent) missing += fmt::format(" {}", r);
      if (rank == 0) shm_unlink(name.c_str());
      throw TimeoutError(fmt::format("ranks{} never attached to {} within {} ms", missing, name,
                                     timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // Everyone has it mapped: drop the name so no crash can leak the memory.
  if (rank == 0) shm_unlink(name.c_str());
  for (int r = 0; r < size; ++r)
    if (seg->rank_line(r).policy != policy)
      throw InvalidArgument(fmt::format("segment {}: rank {} and rank {} were started with "
                                        "different {}: set them the same on every rank",
                                        name, r, rank, policy_knobs));
  return seg;
}

}  // namespace lockstep::comm::shm
