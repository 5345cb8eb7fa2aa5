#pragma once
// The 8-bit activations of one matmul input as the matrix kernels read them,
// built once per input and shared by every matrix that reads it: the plain
// blocks (`blocks`: (n, token_blocks), owned by the caller) and, per token and
// block, the integer sums the row-group kernels take a format's offset off
// with, exactly (group_layout.h): halves (n, 2 token_blocks), the sums of a
// block's values 0..15 and 16..31 (Q6_K's scales cover 16 values; the
// others take the two added).
// Capacity is reserved once (reserve()); build() then never allocates.
#include <cstdint>
#include <vector>

#include "kernels/activation_q8.h"

namespace tally {

struct ActivationPack {
  int64_t n = 0;
  int64_t token_blocks = 0;  // blocks of a token
  const BlockQ8* blocks = nullptr;
  std::vector<int32_t> halves;

  void reserve(int64_t max_tokens, int64_t max_blocks);
  // x: (n_tokens, blocks_per_token) blocks, which must outlive the pack.
  void build(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);
  // build() in two steps, so that threads can pack disjoint token ranges:
  // prepare() sizes the pack for x, pack_tokens() fills tokens [t0, t1) from
  // their blocks, which must be final by then.
  void prepare(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);
  void pack_tokens(int64_t t0, int64_t t1);
  // A pack of its own (allocating): for callers outside the forward pass.
  static ActivationPack of(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token);

  const int32_t* halves_row(int64_t token) const { return halves.data() + 2 * token * token_blocks; }
};

}  // namespace tally
