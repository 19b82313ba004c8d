// A small deterministic random source for the data pipeline. std::shuffle and the std::*
// distributions are implementation-defined, so streams seeded through them would differ between
// libstdc++ and libc++; everything here is specified bit for bit (SplitMix64).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace linac::data::detail {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  /// Derives an independent stream, e.g. Rng(seed, epoch) or Rng(seed, example).
  Rng(uint64_t seed, uint64_t stream) : state_(seed) { state_ = next() ^ (stream * 0xD1B54A32D192ED03ull); }

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n), n > 0, without modulo bias (rejection of the short last bucket).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }
  template <typename T>
  void shuffle(std::vector<T>& v) {  // Fisher-Yates
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace linac::data::detail
