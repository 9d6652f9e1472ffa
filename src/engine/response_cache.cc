#include "engine/response_cache.h"

namespace lockstep::engine::detail {

std::optional<uint32_t> ResponseCache::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

uint32_t ResponseCache::insert(std::vector<Request> per_rank, uint64_t cycle) {
  if (auto old = find(per_rank.front().name)) erase(*old);
  if (occupied_ >= capacity_) {
    // Least recently used; ties broken by slot id so every rank picks the same.
    uint32_t victim = 0;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t s = 0; s < slots_.size(); ++s)
      if (slots_[s] && slots_[s]->last_used < oldest) {
        oldest = slots_[s]->last_used;
        victim = s;
      }
    erase(victim);
  }
  uint32_t slot = 0;
  while (slot < slots_.size() && slots_[slot]) ++slot;
  if (slot == slots_.size()) slots_.emplace_back();
  by_name_[per_rank.front().name] = slot;
  slots_[slot] = Slot{std::move(per_rank), cycle};
  ++occupied_;
  return slot;
}

void ResponseCache::erase(uint32_t slot) {
  if (!occupied(slot)) return;
  by_name_.erase(name(slot));
  slots_[slot].reset();
  --occupied_;
  trim();
}

void ResponseCache::trim() {
  while (!slots_.empty() && !slots_.back()) slots_.pop_back();
}

}  // namespace lockstep::engine::detail
