// AnnouncementTable: uncached requests that some but not yet all ranks of a
// process set have announced. Replicated like ResponseCache: every rank
// applies the same allgathered announcements in the same order.
//
// Thread-safety: none; owned by one Negotiator.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"

namespace lockstep::engine::detail {

struct Announced {
  std::string name;
  std::vector<std::optional<Request>> per_rank;  // indexed by set rank
  int count = 0;
};

class AnnouncementTable {
 public:
  explicit AnnouncementTable(int size) : size_(size) {}

  // Records rank's request. A second announcement of a name by the same rank
  // cannot happen (submission rejects duplicates) and is ignored.
  void add(int rank, Request request);
  // Entries announced by every rank r with !joined[r], oldest first; removed.
  std::vector<Announced> take_complete(const std::vector<uint8_t>& joined);
  // All entries, oldest first.
  std::vector<const Announced*> entries() const;
  void clear();
  bool empty() const { return by_seq_.empty(); }

 private:
  int size_;
  uint64_t next_seq_ = 0;
  std::map<uint64_t, Announced> by_seq_;
  std::unordered_map<std::string, uint64_t> seq_of_;
};

}  // namespace lockstep::engine::detail
