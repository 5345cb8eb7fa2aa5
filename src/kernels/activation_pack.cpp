#include "kernels/activation_pack.h"

#include <cstring>

#include "core/error.h"
#include "kernels/split_layout.h"

namespace tally {

void ActivationPack::reserve(int64_t max_tokens, int64_t max_blocks) {
  const int64_t b8 = (max_blocks + 7) / 8 * 8;
  q.reserve(static_cast<size_t>(max_tokens * split_blocks(max_blocks * 32) * 32));
  d.reserve(static_cast<size_t>(max_tokens * b8));
  s.reserve(static_cast<size_t>(max_tokens * b8));
  sums.reserve(static_cast<size_t>(max_tokens * b8));
  halves.reserve(static_cast<size_t>(max_tokens * 2 * b8));
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

void ActivationPack::prepare(const BlockQ8* x, int64_t n_tokens, int64_t blocks_per_token, bool with_runs) {
  if (n_tokens < 0 || blocks_per_token < 1) fail("activation pack of {} x {} blocks", n_tokens, blocks_per_token);
  n = n_tokens;
  token_blocks = blocks_per_token;
  nb = split_blocks(blocks_per_token * 32);
  nb8 = (nb + 7) / 8 * 8;
  blocks = x;
  runs = with_runs;
  q.resize(runs ? static_cast<size_t>(n * nb * 32) : 0);
  d.assign(static_cast<size_t>(n * nb8), 0.0f);
  s.assign(static_cast<size_t>(n * nb8), 0.0f);
  sums.assign(static_cast<size_t>(n * nb8), 0);
  halves.assign(static_cast<size_t>(n * 2 * nb8), 0);
}

void ActivationPack::pack_tokens(int64_t t0, int64_t t1) {
  static constexpr BlockQ8 kZero{};  // the padding block of an odd count
  for (int64_t t = t0; t < t1; ++t) {
    const BlockQ8* xb = blocks + t * token_blocks;
    auto block = [&](int64_t b) -> const BlockQ8& { return b < token_blocks ? xb[b] : kZero; };
    if (runs)
      for_each_split_run(nb, [&, out = q.data() + t * nb * 32](auto width, int64_t b0) {
        constexpr int W = decltype(width)::value;
        for (int k = 0; k < 8; ++k)
          for (int i = 0; i < W; ++i) std::memcpy(out + b0 * 32 + (k * W + i) * 4, block(b0 + i).q + 4 * k, 4);
      });
    for (int64_t b = 0; b < token_blocks; ++b) {
      d[t * nb8 + b] = xb[b].d;
      s[t * nb8 + b] = xb[b].s;
      int32_t h0 = 0, h1 = 0;  // two plain loops: they vectorize
      for (int v = 0; v < 16; ++v) h0 += xb[b].q[v];
      for (int v = 16; v < 32; ++v) h1 += xb[b].q[v];
      halves[2 * (t * nb8 + b)] = h0;
      halves[2 * (t * nb8 + b) + 1] = h1;
      sums[t * nb8 + b] = h0 + h1;
    }
  }
}

}  // namespace tally
