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

using Clock = std::chrono::steady_clock;

std::string reserve_failure(size_t bytes, const std::string& name, int err) {
  return fmt::format(
      "cannot reserve {} bytes of /dev/shm for {}: {} (is /dev/shm full or too "
      "small? lower LOCKSTEP_SHM_SLOT_BYTES)",
      bytes, name, std::strerror(err));
}

[[noreturn]] void fail_errno(const std::string& what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
}

// Creates the file at its final size (the size attaching ranks wait for)
// and allocates rank 0's pages (Note [First touch]).
int create_fd(const std::string& name, size_t bytes, const std::vector<PageRange>& mine) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST)
    throw Error(
        fmt::format("shared-memory segment /dev/shm{} already exists: another job uses the same "
                    "LOCKSTEP_JOB_ID, or a crashed job left it behind (remove it)",
                    name));
  if (fd < 0) fail_errno(fmt::format("shm_open({})", name));
  int err = ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : reserve_pages(fd, mine);
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw Error(reserve_failure(bytes, name, err));
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
            "LOCKSTEP_SHM_SLOT_BYTES",
            name, st.st_size, bytes));
      }
      close(fd);
    } else if (errno != ENOENT) {
      fail_errno(fmt::format("shm_open({})", name));
    }
    if (Clock::now() > deadline)
      throw TimeoutError(
          fmt::format("rank 0 never created shared-memory segment {} (is rank 0 "
                      "running with the same LOCKSTEP_JOB_ID?)",
                      name));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void init_header(std::byte* base, int size, size_t slot_bytes, size_t p2p_bytes, size_t total) {
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
    throw Error(
        fmt::format("segment {} has layout version {}, this build expects {}: all "
                    "workers must run the same lockstep build",
                    name, h.version, kVersion));
}

}  // namespace

Layout::Layout(int n, size_t slot_bytes, size_t p2p_bytes) {
  size_t nn = static_cast<size_t>(n) * n;
  ranks = kPage;
  counts = round_up(ranks + sizeof(RankLine) * n, 128);
  channels = round_up(counts + 4 * nn * sizeof(uint64_t), 128);
  slots = round_up(channels + sizeof(Channel) * nn, kPage);
  p2p = round_up(slots + static_cast<size_t>(n) * 2 * slot_bytes, kPage);
  p2p_block = round_up(static_cast<size_t>(n) * 2 * p2p_bytes, kPage);
  total = p2p + static_cast<size_t>(n) * p2p_block;
}

// Note [First touch]
// A page of a tmpfs file is allocated, on the NUMA node of the process that
// allocates it, when it is first touched or fallocated; it stays there. If
// rank 0 allocated the whole segment (as before issue 28), every rank's
// staging buffers lived on rank 0's node, and on a host with several nodes
// every rank's staging writes, the bulk of an allreduce's segment traffic,
// crossed the interconnect. So each rank allocates the pages it writes:
// its two slots (staging and, in two_step, its reduced share) and the
// mailboxes it sends from; peers read them remotely, once. The head
// (header, rank lines, tables, channels) is a few pages every rank writes a
// line of, left to rank 0. Rank 0 sizes the file and allocates its part
// before the others attach; each other rank allocates its part before it
// counts itself attached, so no collective touches a hole. The node is the
// one the process runs on when its communicator starts: a rank bound to its
// cores before then (mpirun, taskset, numactl) gets its pages on its own node.
std::vector<PageRange> first_touch_ranges(const Layout& l, int rank, size_t slot_bytes) {
  const size_t r = static_cast<size_t>(rank);
  std::vector<PageRange> out;
  if (rank == 0) out.push_back({0, l.slots});
  out.push_back({l.slots + r * 2 * slot_bytes, l.slots + (r + 1) * 2 * slot_bytes});
  out.push_back({l.p2p + r * l.p2p_block, l.p2p + (r + 1) * l.p2p_block});
  return out;
}

int reserve_pages(int fd, const std::vector<PageRange>& ranges) {
  for (const PageRange& range : ranges) {
    if (range.end <= range.begin) continue;
    int err = posix_fallocate(fd, static_cast<off_t>(range.begin),
                              static_cast<off_t>(range.end - range.begin));
    if (err != 0) return err;
  }
  return 0;
}

Segment::Segment(std::string name, std::byte* base, size_t bytes, int size, size_t slot_bytes,
                 size_t p2p_bytes)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      size_(size),
      slot_bytes_(slot_bytes),
      p2p_bytes_(p2p_bytes) {
  Layout l(size, slot_bytes, p2p_bytes);
  p2p_block_ = l.p2p_block;
  ranks_ = reinterpret_cast<RankLine*>(base + l.ranks);
  counts_ = reinterpret_cast<uint64_t*>(base + l.counts);
  channels_ = reinterpret_cast<Channel*>(base + l.channels);
  slots_ = base + l.slots;
  p2p_ = base + l.p2p;
}

Segment::~Segment() { munmap(base_, bytes_); }

void Segment::wait_attached(int rank, Clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  while (header().attached.load() < static_cast<uint32_t>(size_)) {
    for (int r = 0; r < size_; ++r)
      if (rank_line(r).state.load() == kLeft) {
        if (rank == 0) shm_unlink(name_.c_str());
        throw Error(
            fmt::format("rank {} could not reserve its pages of {} (see its error)", r, name_));
      }
    if (Clock::now() > deadline) {
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (rank_line(r).state.load() == kAbsent) missing += fmt::format(" {}", r);
      if (rank == 0) shm_unlink(name_.c_str());
      throw TimeoutError(fmt::format("ranks{} never attached to {} within {} ms", missing, name_,
                                     timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::unique_ptr<Segment> Segment::open(const std::string& name, int rank, int size,
                                       size_t slot_bytes, size_t p2p_bytes, uint64_t policy,
                                       std::string_view policy_knobs, int node,
                                       std::chrono::milliseconds timeout) {
  Layout layout(size, slot_bytes, p2p_bytes);
  auto deadline = Clock::now() + timeout;
  const std::vector<PageRange> mine = first_touch_ranges(layout, rank, slot_bytes);
  int fd =
      rank == 0 ? create_fd(name, layout.total, mine) : attach_fd(name, layout.total, deadline);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  void* mem = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
  // Before counting itself attached, so no collective touches a hole.
  int err = rank == 0 ? 0 : reserve_pages(fd, mine);
  if (err != 0) {
    me.state.store(kLeft);  // peers fail now instead of at the deadline
    throw Error(reserve_failure(layout.total, name, err));
  }
  me.pid.store(getpid());
  me.policy = policy;
  me.node = node;
  me.state.store(kAttached);
  seg->header().attached.fetch_add(1);
  seg->wait_attached(rank, deadline, timeout);
  // Everyone has it mapped: drop the name so no crash can leak the memory.
  if (rank == 0) shm_unlink(name.c_str());
  for (int r = 0; r < size; ++r)
    if (seg->rank_line(r).policy != policy)
      throw InvalidArgument(
          fmt::format("segment {}: rank {} and rank {} were started with "
                      "different {}: set them the same on every rank",
                      name, r, rank, policy_knobs));
  return seg;
}

}  // namespace lockstep::comm::shm
