// The K-quant row layout (kquant_layout.h): repacking keeps every value (the
// rows dequantize bit for bit as the file's do), and the kernels of each SIMD
// level (AVX2, AVX-VNNI, AVX-512 VNNI, each tested directly where the CPU has
// it) agree with the scalar reference within float rounding (also at the
// largest magnitudes, where the 16-bit partial sums of AVX2 come closest to
// overflowing), with each other bit for bit, and with themselves whatever the
// tile shape, token count or row range. matmul_test.cpp checks every level
// against the dequantized product in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/activation_pack.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"
#include "kernels/kquant_layout.h"
#include "gemm_checks.h"
#include "random_blocks.h"

namespace tally {
namespace {

using test::extreme_activations;
using test::extreme_rows;
using test::random_activations;
using test::random_rows;

constexpr DType kTypes[] = {DType::Q4_K, DType::Q5_K};  // Q6_K: group_layout_test.cpp
// 1, 2, 3, 6 and 9 super-blocks (1536: SmolLM2's feed-forward width).
constexpr int64_t kCols[] = {256, 512, 768, 1536, 2304};

// The levels this CPU runs, scalar first.
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> v;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512Vnni})
    if (simd_supported(l)) v.push_back(l);
  return v;
}

// Sum over (value, token) of |terms| the kernels add in float: |w_i x_i| and
// |dmin m| |x_i| twice (the min is added apart from d sc q).
// Bounds the difference that summation order alone can make.
std::vector<double> term_sums(DType type, const std::vector<uint8_t>& native, int64_t rows, int64_t cols,
                              const std::vector<BlockQ8>& x, int64_t tokens) {
  const uint64_t rb = row_bytes(type, cols);
  std::vector<double> out(static_cast<size_t>(rows * tokens));
  std::vector<float> wd(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = native.data() + r * rb;
    dequantize_row(type, row, wd.data(), cols);
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const BlockQ8& xb = x[t * (cols / 32) + i / 32];
        const uint8_t* blk = row + i / 256 * traits(type).type_size;
        uint8_t sc, mn;
        unpack_k_scale_min(blk + 4, static_cast<int>(i % 256 / 32), &sc, &mn);
        const double m = std::fabs(load_f16(blk + 2)) * mn;
        sum += (std::fabs(wd[i]) + 2 * m) * std::fabs(static_cast<double>(xb.d) * xb.q[i % 32]);
      }
      out[t * rows + r] = sum;
    }
  }
  return out;
}

TEST(KquantLayout, RepackKeepsEveryValue) {
  std::mt19937 rng(31);
  for (DType type : kTypes)
    for (int64_t cols : kCols) {
      const int64_t rows = 3;
      for (const auto& native : {random_rows(type, rows, cols, rng), extreme_rows(type, rows, cols)}) {
        const test::LaidOut k = test::lay_out(type, rows, cols, native);
        ASSERT_EQ(k.w.layout, RowLayout::Kquant);
        ASSERT_EQ(k.w.row_bytes, row_bytes(type, cols)) << "the layout keeps the file's size";
        std::vector<float> want(cols), got(cols);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, native.data() + r * row_bytes(type, cols), want.data(), cols);
          dequantize_matrix_row(k.w, r, got.data());
          ASSERT_EQ(std::memcmp(want.data(), got.data(), cols * sizeof(float)), 0)
              << dtype_name(type) << " cols " << cols << " row " << r;
        }
      }
    }
}

TEST(KquantLayout, RowsOfPartialSuperBlocksAreRefused) {
  EXPECT_FALSE(kquant_supported(DType::Q4_0));
  EXPECT_FALSE(kquant_supported(DType::Q6_K));  // the row-group layout's
  EXPECT_TRUE(kquant_supported(DType::Q5_K));
  std::vector<uint8_t> native(1024);
  std::unique_ptr<uint8_t[]> storage;
  EXPECT_THROW(make_weight_matrix(DType::Q4_K, 1, 576, native.data(), storage), Error);
}

// Every level against the scalar reference: random rows and activations of
// odd shapes, and the largest magnitudes.
TEST(KquantLayout, EveryLevelMatchesScalarReference) {
  std::mt19937 rng(32);
  for (DType type : kTypes)
    for (int64_t cols : kCols)
      for (int64_t rows : {1, 5, 13})
        for (int64_t tokens : {1, 3, 17}) {
          const bool extreme = rows == 5;
          const auto native = extreme ? extreme_rows(type, rows, cols) : random_rows(type, rows, cols, rng);
          const auto x = extreme ? extreme_activations(tokens, cols) : random_activations(tokens, cols, rng);
          const test::LaidOut k = test::lay_out(type, rows, cols, native);
          const auto ref = test::run_gemm(gemm_kquant_scalar, k.w, x, tokens);
          const auto terms = term_sums(type, native, rows, cols, x, tokens);
          for (SimdLevel level : levels()) {
            const auto got = test::run_gemm(kernels_at(level).gemm_for(type), k.w, x, tokens);
            for (size_t i = 0; i < ref.size(); ++i)
              ASSERT_LE(std::fabs(got[i] - ref[i]), 2e-6 * terms[i] + 1e-30)
                  << simd_level_name(level) << " " << dtype_name(type) << " " << rows << "x" << cols << " tokens "
                  << tokens << (extreme ? " (largest magnitudes)" : "") << " at " << i << ": " << got[i] << " vs "
                  << ref[i];
          }
        }
}

TEST(KquantLayout, SimdLevelsAreBitIdentical) {
  std::vector<SimdLevel> simd;
  for (SimdLevel l : levels())
    if (l != SimdLevel::Scalar) simd.push_back(l);
  if (simd.size() < 2) GTEST_SKIP() << "CPU has a single SIMD level";
  std::mt19937 rng(33);
  for (DType type : kTypes)
    for (int64_t cols : kCols) {
      const int64_t rows = 11, tokens = 6;
      const test::LaidOut k = test::lay_out(type, rows, cols, random_rows(type, rows, cols, rng));
      const auto x = random_activations(tokens, cols, rng);
      const auto first = test::run_gemm(kernels_at(simd[0]).gemm_for(type), k.w, x, tokens);
      for (size_t i = 1; i < simd.size(); ++i)
        EXPECT_EQ(test::run_gemm(kernels_at(simd[i]).gemm_for(type), k.w, x, tokens), first)
            << simd_level_name(simd[i]) << " vs " << simd_level_name(simd[0]) << " " << dtype_name(type) << " cols "
            << cols;
    }
}

// Prefill tiles (1 row x 4/2/1 tokens) and decode tiles (4 rows x 1 token)
// give the same bits, whatever the row range a thread gets.
TEST(KquantLayout, ResultsDoNotDependOnTokenCountOrRowRange) {
  std::mt19937 rng(34);
  for (SimdLevel level : levels())
    for (DType type : kTypes) {
      const GemmFn fn = kernels_at(level).gemm_for(type);
      const int64_t rows = 23, cols = 1536, tokens = 19;
      const test::LaidOut k = test::lay_out(type, rows, cols, random_rows(type, rows, cols, rng));
      const auto x = random_activations(tokens, cols, rng);
      test::expect_same_bits_per_token_and_row_range(fn, k.w, x, tokens,
                                               std::string(simd_level_name(level)) + " " + std::string(dtype_name(type)));
    }
}

}  // namespace
}  // namespace tally
