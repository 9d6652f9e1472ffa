// Internal: the classic streaming shuffle (as tf.data's shuffle): keep S
// records; each new record replaces a randomly chosen one, which is emitted.
// Single-threaded; deterministic for a given seed.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "data/rng.h"

namespace lockstep::data {

template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {
    items_.reserve(capacity_);
  }

  // The record to emit now, if the buffer is full.
  std::optional<T> push(T item) {
    if (capacity_ <= 1) return item;
    if (items_.size() < capacity_) {
      items_.push_back(std::move(item));
      return std::nullopt;
    }
    std::swap(items_[rng_.below(items_.size())], item);
    return item;
  }

  // Drains the remaining records in random order at the end of the stream.
  std::optional<T> pop() {
    if (items_.empty()) return std::nullopt;
    std::swap(items_[rng_.below(items_.size())], items_.back());
    T item = std::move(items_.back());
    items_.pop_back();
    return item;
  }

 private:
  size_t capacity_;
  Rng rng_;
  std::vector<T> items_;
};

}  // namespace lockstep::data
