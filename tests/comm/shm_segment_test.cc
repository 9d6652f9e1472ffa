// The shared-memory segment's page placement (Note [First touch] in
// src/comm/transport/shm/segment.cc): which rank allocates which pages.
// One NUMA node here, so the tests check the assignment and that
// reserve_pages allocates exactly it, not where the pages land.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "comm/transport/shm/segment.h"

namespace lockstep::testing {
namespace {

using comm::shm::first_touch_ranges;
using comm::shm::Layout;
using comm::shm::PageRange;

constexpr size_t kPage = 4096;
constexpr size_t kP2p = 64 * 1024 + 64;  // the transport's mailbox size

bool inside(const std::vector<PageRange>& ranges, size_t begin, size_t end) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const PageRange& r) { return r.begin <= begin && end <= r.end; });
}

TEST(ShmFirstTouch, EveryPageHasOneOwnerAndEachRankOwnsWhatItWrites) {
  for (int n : {1, 2, 3, 5, 16})
    for (size_t slot : {size_t{4096}, size_t{1} << 20}) {
      Layout l(n, slot, kP2p);
      std::vector<PageRange> all;
      for (int r = 0; r < n; ++r) {
        auto mine = first_touch_ranges(l, r, slot);
        // Its two slots and every mailbox it sends from.
        EXPECT_TRUE(inside(mine, l.slots + r * 2 * slot, l.slots + (r + 1) * 2 * slot))
            << "n=" << n << " rank " << r;
        for (int dst = 0; dst < n; ++dst) {
          size_t box = l.p2p + r * l.p2p_block + dst * 2 * kP2p;
          EXPECT_TRUE(inside(mine, box, box + 2 * kP2p)) << "n=" << n << " " << r << "->" << dst;
        }
        EXPECT_EQ(inside(mine, 0, l.slots), r == 0) << "the head is rank 0's";
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
      size_t at = 0;  // disjoint, page-aligned, no gap, up to the end
      for (const PageRange& r : all) {
        EXPECT_EQ(r.begin, at) << "n=" << n << " slot=" << slot;
        EXPECT_EQ(r.begin % kPage, 0u);
        EXPECT_EQ(r.end % kPage, 0u);
        at = r.end;
      }
      EXPECT_EQ(at, l.total) << "n=" << n << " slot=" << slot;
    }
}

// Bytes of the tmpfs file that have pages (fallocated ones included, which
// SEEK_DATA reports as holes until written).
size_t allocated_bytes(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return static_cast<size_t>(st.st_blocks) * 512;
}

// Each rank's reservation allocates its ranges and nothing else: every rank
// adds exactly its own bytes, in any attach order, and reserving a range a
// second time adds nothing (so it was the first to allocate them).
TEST(ShmFirstTouch, ReservePagesAllocatesExactlyTheRanksRanges) {
  const int n = 3;
  const size_t slot = 64 * 1024;
  Layout l(n, slot, kP2p);
  int fd = memfd_create("lockstep-first-touch", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(l.total)), 0);
  EXPECT_EQ(allocated_bytes(fd), 0u);
  for (int r : {1, 0, 2}) {
    auto mine = first_touch_ranges(l, r, slot);
    size_t before = allocated_bytes(fd), own = 0;
    for (const PageRange& m : mine) own += m.end - m.begin;
    ASSERT_EQ(comm::shm::reserve_pages(fd, mine), 0);
    EXPECT_EQ(allocated_bytes(fd) - before, own) << "rank " << r;
    ASSERT_EQ(comm::shm::reserve_pages(fd, mine), 0);
    EXPECT_EQ(allocated_bytes(fd) - before, own) << "rank " << r << ", again";
  }
  EXPECT_EQ(allocated_bytes(fd), l.total);
  close(fd);
}

}  // namespace
}  // namespace lockstep::testing
