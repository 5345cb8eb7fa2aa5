#pragma once
// Seeded random numbers that are the same on every platform and standard
// library (std::uniform_real_distribution is not): splitmix64-seeded xoshiro256**.
#include <cstdint>

namespace tally {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1) with 53 random bits

 private:
  uint64_t s_[4];
};

}  // namespace tally
