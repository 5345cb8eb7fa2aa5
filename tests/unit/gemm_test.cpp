// The tiled kernels (gemm.h) against the scalar reference matmul, and their
// promises: results independent of the tile shape and of n_tokens, and the
// AVX2 and AVX-VNNI variants bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/activation_q8.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "random_blocks.h"

using namespace tally;
using tally::test::random_activations;
using tally::test::random_rows;

namespace {

bool at_least(SimdLevel l) { return simd_supported(l); }

struct Case {
  DType type;
  int64_t rows, cols, tokens;
};

}  // namespace

TEST(Gemm, MatchesScalarReferenceOnOddShapes) {
  if (!at_least(SimdLevel::Avx2)) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(11);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0})
    for (const Case c : {Case{type, 1, 32, 1}, Case{type, 5, 64, 3}, Case{type, 37, 96, 33}, Case{type, 8, 576, 2},
                         Case{type, 13, 1536, 67}}) {
      const auto aligned = random_rows(type, c.rows, c.cols, rng);
      const auto x = random_activations(c.tokens, c.cols, rng);
      for (int offset : {0, 3}) {  // the kernels must not need aligned weights
        std::vector<uint8_t> bytes(offset, 0);
        bytes.insert(bytes.end(), aligned.begin(), aligned.end());
        WeightMatrix w{type, c.rows, c.cols, row_bytes(type, c.cols), bytes.data() + offset};
        std::vector<float> ref(c.rows * c.tokens), got(c.rows * c.tokens);
        matmul_reference(w, x.data(), c.tokens, ref.data());
        gemm_avx2_fn(type)(w, x.data(), c.tokens, got.data(), 0, c.rows);
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], 1e-4f * (1 + std::fabs(ref[i])))
              << dtype_name(type) << " offset " << offset << " " << c.rows << "x" << c.cols << " tokens " << c.tokens << " at " << i;
      }
    }
}

TEST(Gemm, ResultsDoNotDependOnTokenCountOrRowRange) {
  if (!at_least(SimdLevel::Avx2)) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(5);
  const int64_t rows = 23, cols = 128, tokens = 9;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const auto bytes = random_rows(type, rows, cols, rng);
    const auto x = random_activations(tokens, cols, rng);
    WeightMatrix w{type, rows, cols, row_bytes(type, cols), bytes.data()};
    std::vector<float> all(rows * tokens);
    gemm_avx2_fn(type)(w, x.data(), tokens, all.data(), 0, rows);
    for (int64_t t = 0; t < tokens; ++t) {  // one token at a time, rows split unevenly
      std::vector<float> one(rows);
      gemm_avx2_fn(type)(w, x.data() + t * (cols / 32), 1, one.data(), 0, 7);
      gemm_avx2_fn(type)(w, x.data() + t * (cols / 32), 1, one.data(), 7, rows);
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(one[r], all[t * rows + r]) << dtype_name(type) << " t " << t << " r " << r;
    }
  }
}

TEST(Gemm, VnniIsBitIdenticalToAvx2) {
  if (!at_least(SimdLevel::Avx2Vnni)) GTEST_SKIP() << "CPU has no AVX-VNNI";
  std::mt19937 rng(9);
  const int64_t rows = 19, cols = 320, tokens = 5;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const auto bytes = random_rows(type, rows, cols, rng);
    const auto x = random_activations(tokens, cols, rng);
    WeightMatrix w{type, rows, cols, row_bytes(type, cols), bytes.data()};
    std::vector<float> a(rows * tokens), b(rows * tokens);
    gemm_avx2_fn(type)(w, x.data(), tokens, a.data(), 0, rows);
    gemm_vnni_fn(type)(w, x.data(), tokens, b.data(), 0, rows);
    EXPECT_EQ(a, b) << dtype_name(type);
  }
}

TEST(Gemm, NoTiledKernelForOtherTypes) {
  EXPECT_EQ(gemm_fn(DType::Q6_K), nullptr);
  EXPECT_EQ(gemm_fn(DType::F32), nullptr);
}
