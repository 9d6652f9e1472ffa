#include "engine/announcement_table.h"

namespace lockstep::engine::detail {

void AnnouncementTable::add(int rank, Request request) {
  auto it = seq_of_.find(request.name);
  if (it == seq_of_.end()) {
    uint64_t seq = next_seq_++;
    it = seq_of_.emplace(request.name, seq).first;
    Announced& a = by_seq_[seq];
    a.name = request.name;
    a.per_rank.resize(size_);
  }
  Announced& a = by_seq_[it->second];
  if (a.per_rank[rank]) return;
  a.per_rank[rank] = std::move(request);
  ++a.count;
}

std::vector<Announced> AnnouncementTable::take_complete(const std::vector<uint8_t>& joined) {
  std::vector<Announced> out;
  for (auto it = by_seq_.begin(); it != by_seq_.end();) {
    bool complete = it->second.count > 0;
    for (int r = 0; r < size_ && complete; ++r)
      if (!joined[r] && !it->second.per_rank[r]) complete = false;
    if (!complete) {
      ++it;
      continue;
    }
    seq_of_.erase(it->second.name);
    out.push_back(std::move(it->second));
    it = by_seq_.erase(it);
  }
  return out;
}

std::vector<const Announced*> AnnouncementTable::entries() const {
  std::vector<const Announced*> out;
  for (const auto& [seq, a] : by_seq_) out.push_back(&a);
  return out;
}

void AnnouncementTable::clear() {
  by_seq_.clear();
  seq_of_.clear();
}

}  // namespace lockstep::engine::detail
