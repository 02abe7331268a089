// SplitMix64: a tiny seedable generator (one 64-bit state, a Weyl step and a bit mixer), for
// the deterministic text the built-in corpus and the tokenizer's sample text generate. Not
// for anything that must be unpredictable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace longhaul {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // In [0, 1): the top 53 bits of the next draw.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // In [0, n), n > 0 (modulo bias is irrelevant for the small n used here).
  size_t Below(size_t n) { return size_t(Next() % n); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[Below(v.size())];
  }

 private:
  uint64_t state_;
};

}  // namespace longhaul
