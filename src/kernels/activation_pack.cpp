#include "kernels/activation_pack.h"

#include "core/error.h"

namespace tally {

void ActivationPack::reserve(int64_t max_tokens, int64_t max_blocks) {
  halves.reserve(static_cast<size_t>(2 * max_tokens * max_blocks));
}

ActivationPack ActivationPack::of(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token) {
  ActivationPack p;
  p.build(x, n_tokens, blocks_per_token);
  return p;
}

void ActivationPack::build(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token) {
  prepare(x, n_tokens, blocks_per_token);
  pack_tokens(0, n_tokens);
}

void ActivationPack::prepare(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token) {
  if (n_tokens < 0 || blocks_per_token < 1) fail("activation pack of {} x {} blocks", n_tokens, blocks_per_token);
  n = n_tokens;
  token_blocks = blocks_per_token;
  blocks = x;
  halves.resize(static_cast<size_t>(2 * n * token_blocks));
}

void ActivationPack::pack_tokens(int64_t t0, int64_t t1) {
  for (int64_t i = t0 * token_blocks; i < t1 * token_blocks; ++i) {
    int32_t h0 = 0, h1 = 0;  // two plain loops: they vectorize
    for (int v = 0; v < 16; ++v) h0 += blocks[i].q[v];
    for (int v = 16; v < 32; ++v) h1 += blocks[i].q[v];
    halves[2 * i] = h0;
    halves[2 * i + 1] = h1;
  }
}

}  // namespace tally
