#pragma once
// Q8 activations rearranged for the split-layout kernels (see split_layout.h),
// built once per matmul input and shared by every matrix that reads it.
// `blocks` keeps the plain blocks (the scalar kernels read those).
// Per token, q holds nb * 32 int8 values in the runs of the weights' quants
// (split_layout.h): in a run of W blocks, for k = 0..7, values 4k..4k+3 of its
// blocks side by side (4W bytes per k). nb is the token's blocks rounded up
// to even (split_blocks); a padding block is zero.
// d, s: (n, nb8) floats, the blocks' scale and scale * sum, zero-padded to
// nb8 = nb rounded up to 8 (kernels read scales 8 blocks at a time); sums:
// (n, nb8), the integer sum of each block's quants (the row-group kernels
// take a format's offset off their integer sums with it, exactly); halves:
// (n, 2 nb8), the sums of values 0..15 and 16..31 of each block (Q6_K's
// scales cover 16 values).
// runs: whether q holds the runs; only the split and K-quant kernels read
// them (the row-group and scalar kernels read `blocks`), so a caller whose
// matrices are all in other layouts skips them.
// Capacity is reserved once (reserve()); build() then never allocates. q, d
// and s start on a cache line, and each token's q is a whole number of lines
// (nb * 32 bytes, nb even), so the 64-byte loads of the kernels never split.
#include <cstdint>
#include <vector>

#include "core/aligned_allocator.h"
#include "kernels/activation_q8.h"

namespace tally {

struct ActivationPack {
  int64_t n = 0, nb = 0, nb8 = 0;
  int64_t token_blocks = 0;  // blocks of a token in `blocks` (nb less any padding block)
  bool runs = true;
  const BlockQ8* blocks = nullptr;  // (n, cols / 32): the plain blocks
  CacheAlignedVector<int8_t> q;
  CacheAlignedVector<float> d, s;
  CacheAlignedVector<int32_t> sums, halves;

  void reserve(int64_t max_tokens, int64_t max_blocks);
  // x: (n_tokens, blocks_per_token) blocks, which must outlive the pack.
  void build(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);
  // build() in two steps, so that threads can pack disjoint token ranges:
  // prepare() sizes the pack for x (zero scales), pack_tokens() fills tokens
  // [t0, t1) from their blocks, which must be final by then.
  void prepare(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token, bool with_runs = true);
  void pack_tokens(int64_t t0, int64_t t1);
  // A pack of its own (allocating): for callers outside the forward pass.
  static ActivationPack of(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);

  // Values of `token` from the run starting at block b on.
  const int8_t* q_at(int64_t token, int64_t b) const { return q.data() + (token * nb + b) * 32; }
  const float* d_row(int64_t token) const { return d.data() + token * nb8; }
  const float* s_row(int64_t token) const { return s.data() + token * nb8; }
  const int32_t* sums_row(int64_t token) const { return sums.data() + token * nb8; }
  const int32_t* halves_row(int64_t token) const { return halves.data() + token * 2 * nb8; }
};

}  // namespace tally
