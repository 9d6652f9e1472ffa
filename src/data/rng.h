// Small deterministic RNG. std::shuffle and the std distributions differ across
// standard libraries; ranks must agree on orders, so we use our own.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace lockstep::data {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One seed from several values (seed, epoch, rank, stream...).
inline uint64_t mix_seed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc909ull;
  for (uint64_t p : parts) h = splitmix64(h ^ p);
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_++); }
  // Uniform in [0, n), n > 0; the modulo bias is < n / 2^64, irrelevant here.
  uint64_t below(uint64_t n) { return next() % n; }
  bool coin() { return next() >> 63; }

  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace lockstep::data
