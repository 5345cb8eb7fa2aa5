#pragma once
// Session options and inputs the session-level tests share: small blocks (8
// positions, so a few dozen tokens span several), two threads, greedy
// decoding, and a fixed token pattern inside any test vocabulary of 50+.
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace tally::test {

inline SessionOptions small_block_session(DType cache, int64_t n_ctx) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.cache_type = cache;
  o.n_threads = 2;
  o.block_size = 8;
  return o;
}

inline GenerateOptions greedy_options(int64_t max_tokens) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  return g;
}

inline std::vector<int32_t> token_pattern(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (7 * i * i + 3 * i + 1) % 50;
  return t;
}

}  // namespace tally::test
