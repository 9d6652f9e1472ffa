// The shared-memory segment of one communicator: layout and lifetime.
//
// Layout (all offsets fixed by size, slot_bytes and p2p_bytes, which every
// rank must agree on):
//   Header                      one page
//   RankLine[size]              128 B each: step counter, op descriptors, fills, pid,
//                               single-copy addresses
//   CountsTable[2][2][size][size] bytes each rank sends to / expects from each peer
//   Channel[size][size]         point-to-point counters (src, dst)
//   slots[size][2]              per-rank staging buffers, slot_bytes each
//   p2p[size][size][2]          point-to-point buffers, p2p_bytes each; each
//                               sender's block starts on a page
//
// Placement (Note [First touch] in segment.cc): each rank allocates the
// pages it writes (its slots and outgoing mailboxes), rank 0 the head.
//
// Lifetime: rank 0 creates the segment (O_EXCL, mode 0600) under
// /dev/shm/lockstep-<job>-<tag>; the others attach; once all have attached
// rank 0 unlinks the name, so the memory vanishes with the last process even
// after SIGKILL. `lockstep run` removes names left by a job that died before
// that point.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/kit/op_desc.h"
#include "lockstep/base/check.h"

namespace lockstep::comm::shm {

inline constexpr uint64_t kMagic = 0x6c6f636b73746570ull;  // "lockstep"
inline constexpr uint32_t kVersion = 6;

// A futex word and the number of processes sleeping on it (so the writer
// only pays for FUTEX_WAKE when somebody sleeps).
struct WaitWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
};

// One cache line a rank writes and every peer polls; the second line holds
// rarely-read identity fields so they do not share the polled line.
struct alignas(128) RankLine {
  WaitWord step;
  kit::OpDesc desc[2];  // indexed by collective sequence parity
  // Buffer fills before the collective of that parity began: equal on every
  // rank (Note [Buffer parity] in shm_backend.cc), checked in debug builds.
  uint64_t fills[2];
  alignas(64) std::atomic<int32_t> pid{0};
  std::atomic<uint32_t> state{0};  // RankState
  // Single-copy allreduce (shm_cma.cc): this rank's input and output
  // addresses for the current call, and its answer to the first-use probe
  // (CmaProbe). Written before the call's first step, read after it.
  uint64_t cma_send = 0;
  uint64_t cma_recv = 0;
  std::atomic<uint32_t> cma_probe{0};
  // A fingerprint of the knobs that pick algorithms (LOCKSTEP_SHM_ALGORITHM,
  // _SYNC, _SMALL_BYTES, _CHUNK_BYTES, _NODES): ranks that disagree would follow
  // different protocols, so open() compares them once every rank attached.
  uint64_t policy = 0;
  // The NUMA node this rank is bound to, or -1 (numa.h); written before the
  // rank counts itself attached, read by the two-level allreduce's grouping.
  int32_t node = -1;
};
static_assert(sizeof(RankLine) == 128);

enum RankState : uint32_t { kAbsent = 0, kAttached = 1, kLeft = 2 };

struct alignas(128) Channel {
  WaitWord sent;               // written by the sender: pieces published
  alignas(64) WaitWord acked;  // written by the receiver: pieces consumed
};

struct P2pHeader {
  int32_t tag;
  uint32_t piece;
  uint64_t total_bytes;
  uint64_t piece_bytes;
};
inline constexpr size_t kP2pHeaderBytes = 64;

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  uint64_t slot_bytes;
  uint64_t p2p_bytes;
  uint64_t total_bytes;
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> ready;
  std::atomic<int32_t> abort_rank;     // -1: no abort; else the rank that aborted first
  std::atomic<uint32_t> abort_posted;  // 1 once abort_reason is written
  int32_t abort_dead_rank;             // the dead peer behind the abort, or -1
  char abort_reason[512];
};

// Byte offsets of the layout above; a pure function of its arguments.
struct Layout {
  size_t ranks, counts, channels, slots, p2p, p2p_block, total;
  Layout(int size, size_t slot_bytes, size_t p2p_bytes);
};

// A page-aligned byte range [begin, end) of the segment.
struct PageRange {
  size_t begin, end;
  bool operator==(const PageRange&) const = default;
};

// The ranges whose pages `rank` allocates, so that they sit on its NUMA
// node (Note [First touch]): its two slots and its outgoing mailboxes, and
// for rank 0 also the head (header, rank lines, tables, channels). The
// ranks' ranges are disjoint and together cover the segment.
std::vector<PageRange> first_touch_ranges(const Layout& layout, int rank, size_t slot_bytes);

// Allocates the pages of `ranges` in the file `fd` from the calling process
// (posix_fallocate): on tmpfs the pages come from the caller's NUMA node,
// and a full /dev/shm fails here rather than with SIGBUS mid-collective.
// Returns 0 or the error number.
int reserve_pages(int fd, const std::vector<PageRange>& ranges);

class Segment {
 public:
  // Creates (rank 0) or attaches to (others) the segment `name`, waiting up
  // to `timeout` for it to appear and for every rank to attach. Throws
  // lockstep::Error naming the problem (mismatched sizes between ranks,
  // /dev/shm full, stale segment, ranks that never attached), and
  // InvalidArgument when ranks attached with different `policy` fingerprints
  // (`policy_knobs` names what to set alike). `node` is published in this
  // rank's line (RankLine::node).
  static std::unique_ptr<Segment> open(const std::string& name, int rank, int size,
                                       size_t slot_bytes, size_t p2p_bytes, uint64_t policy,
                                       std::string_view policy_knobs, int node,
                                       std::chrono::milliseconds timeout);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header& header() { return *reinterpret_cast<Header*>(base_); }
  // The accessors below are the segment's layout, so each asserts its
  // indices: a wrong rank or parity would read another rank's memory.
  RankLine& rank_line(int r) {
    LOCKSTEP_DCHECK(r >= 0 && r < size_, "shm segment: rank line {} of {}", r, size_);
    return ranks_[r];
  }
  // [0, n*n): bytes rank i sends rank j at i*n+j; [n*n, 2*n*n): bytes rank j
  // expects from rank i at n*n + j*n+i. Indexed by collective parity.
  uint64_t* counts_table(int parity) {
    return counts_ + static_cast<size_t>(parity) * 2 * size_ * size_;
  }
  Channel& channel(int src, int dst) {
    LOCKSTEP_DCHECK(src >= 0 && src < size_ && dst >= 0 && dst < size_,
                    "shm segment: channel {}->{} of {} ranks", src, dst, size_);
    return channels_[src * size_ + dst];
  }
  std::byte* slot(int r, int buffer) {
    LOCKSTEP_DCHECK(r >= 0 && r < size_ && (buffer == 0 || buffer == 1),
                    "shm segment: slot {} of rank {} of {}", buffer, r, size_);
    return slots_ + (static_cast<size_t>(r) * 2 + buffer) * slot_bytes_;
  }
  std::byte* p2p(int src, int dst, int buffer) {
    LOCKSTEP_DCHECK(
        src >= 0 && src < size_ && dst >= 0 && dst < size_ && (buffer == 0 || buffer == 1),
        "shm segment: mailbox {} of {}->{} of {} ranks", buffer, src, dst, size_);
    return p2p_ + static_cast<size_t>(src) * p2p_block_ +
           (static_cast<size_t>(dst) * 2 + buffer) * p2p_bytes_;
  }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t p2p_bytes() const { return p2p_bytes_; }
  const std::string& name() const { return name_; }

 private:
  Segment(std::string name, std::byte* base, size_t bytes, int size, size_t slot_bytes,
          size_t p2p_bytes);
  // Until every rank counted itself attached; throws naming a rank that
  // failed to reserve its pages, or the ranks missing at the deadline.
  void wait_attached(int rank, std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds timeout);

  std::string name_;
  std::byte* base_;
  size_t bytes_;
  int size_;
  size_t slot_bytes_;
  size_t p2p_bytes_;
  size_t p2p_block_;  // bytes of one sender's mailboxes, whole pages
  RankLine* ranks_;
  uint64_t* counts_;
  Channel* channels_;
  std::byte* slots_;
  std::byte* p2p_;
};

}  // namespace lockstep::comm::shm
