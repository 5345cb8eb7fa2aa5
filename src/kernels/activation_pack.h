#pragma once
// Q8 activations rearranged for the split-layout kernels (see split_layout.h),
// built once per matmul input and shared by every matrix that reads it:
//   q4: (n, nb / 2, 64) int8: for blocks 2p, 2p+1 the values 0..15 of both,
//       then the values 16..31 of both (the order of a Q4 pair's nibbles);
//   d, s: (n, nb8) floats, the blocks' scale and scale * sum, zero-padded to
//       nb8 = nb rounded up to 8 (kernels read scales 8 blocks at a time).
// Capacity is reserved once (reserve()); build() then never allocates.
#include <cstdint>
#include <vector>

#include "kernels/activation_q8.h"

namespace tally {

struct ActivationPack {
  int64_t n = 0, nb = 0, nb8 = 0;
  const BlockQ8* blocks = nullptr;  // (n, nb): the plain blocks (signed formats use them)
  std::vector<int8_t> q4;
  std::vector<float> d, s;

  void reserve(int64_t max_tokens, int64_t max_blocks);
  // PRECONDITION: nb even (rows of a multiple of 64 values).
  void build(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);

  const int8_t* q4_pair(int64_t token, int64_t pair) const { return q4.data() + (token * (nb / 2) + pair) * 64; }
  const float* d_row(int64_t token) const { return d.data() + token * nb8; }
  const float* s_row(int64_t token) const { return s.data() + token * nb8; }
};

}  // namespace tally
