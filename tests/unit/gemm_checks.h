#pragma once
// Helpers of the matrix kernel tests (group_layout_test.cpp): one kernel
// entry run directly, and its results independent of the tile shape, the
// token count and the row range.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/activation_pack.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"

namespace tally::test {

// A matrix in the layout of its kernels, with the storage that keeps it.
struct LaidOut {
  LineBytes bytes;
  WeightMatrix w;
};
inline LaidOut lay_out(DType type, int64_t rows, int64_t cols, const std::vector<uint8_t>& native) {
  LaidOut m;
  m.w = make_weight_matrix(type, rows, cols, native.data(), m.bytes);
  return m;
}

// fn's product of all rows of w and `tokens` activation rows.
inline std::vector<float> run_gemm(GemmFn fn, const WeightMatrix& w, const std::vector<BlockQ8>& x, int64_t tokens) {
  const ActivationPack pack = ActivationPack::of(x.data(), tokens, w.cols / 32);
  std::vector<float> y(static_cast<size_t>(w.rows * tokens), std::nanf(""));
  fn(w, pack, y.data(), 0, w.rows);
  return y;
}

// Prefill tiles (1 row x 4/2/1 tokens) and decode tiles (4 rows x 1 token)
// give the same bits, whatever the row range a thread gets: all tokens at
// once against one token at a time over rows [0, 7) and [7, rows).
inline void expect_same_bits_per_token_and_row_range(GemmFn fn, const WeightMatrix& w, const std::vector<BlockQ8>& x,
                                                     int64_t tokens, const std::string& what) {
  const auto all = run_gemm(fn, w, x, tokens);
  const int64_t blocks = w.cols / 32;
  for (int64_t t = 0; t < tokens; ++t) {
    const ActivationPack one = ActivationPack::of(x.data() + t * blocks, 1, blocks);
    std::vector<float> y(w.rows);
    fn(w, one, y.data(), 0, 7);
    fn(w, one, y.data(), 7, w.rows);
    for (int64_t r = 0; r < w.rows; ++r) ASSERT_EQ(y[r], all[t * w.rows + r]) << what << " t " << t << " r " << r;
  }
}

}  // namespace tally::test
