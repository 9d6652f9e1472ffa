// ResponseCache: names that negotiated successfully before, so that a repeat
// submission is announced with one bit (its slot) instead of its full
// request. Replicated: every rank of the process set applies the same
// mutations in the same order (they are driven by negotiation results only),
// so slot ids agree everywhere without a coordinator.
//
// Thread-safety: none; owned by one Negotiator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"

namespace lockstep::engine::detail {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Slot of `name`, if cached.
  std::optional<uint32_t> find(const std::string& name) const;
  // The request each rank made when the slot was filled.
  const std::vector<Request>& per_rank(uint32_t slot) const { return slots_[slot]->per_rank; }
  const std::string& name(uint32_t slot) const { return slots_[slot]->per_rank.front().name; }
  bool occupied(uint32_t slot) const { return slot < slots_.size() && slots_[slot].has_value(); }

  // Caches `per_rank` under its name in the lowest free slot, evicting the
  // least recently used entry when full. Returns the slot.
  uint32_t insert(std::vector<Request> per_rank, uint64_t cycle);
  void erase(uint32_t slot);
  void touch(uint32_t slot, uint64_t cycle) { slots_[slot]->last_used = cycle; }
  // Length of the readiness vector: one past the highest occupied slot.
  size_t num_slots() const { return slots_.size(); }

 private:
  struct Slot {
    std::vector<Request> per_rank;
    uint64_t last_used = 0;
  };
  void trim();

  size_t capacity_;
  size_t occupied_ = 0;
  std::vector<std::optional<Slot>> slots_;
  std::unordered_map<std::string, uint32_t> by_name_;
};

}  // namespace lockstep::engine::detail
