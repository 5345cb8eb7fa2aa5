// The split row layout (split_layout.h): repacking keeps every value (an odd
// block count gets a zero padding block), and the kernels of each SIMD level
// (AVX2, AVX-VNNI, AVX-512 VNNI, each tested directly where the CPU has it)
// agree with the scalar reference (also at the largest magnitudes, where the
// 16-bit partial sums of AVX2 come closest to overflowing), with each other
// bit for bit, and with themselves whatever the tile shape or row range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/activation_pack.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"
#include "kernels/split_layout.h"
#include "gemm_checks.h"
#include "random_blocks.h"

namespace tally {
namespace {

using test::extreme_activations;
using test::extreme_rows;
using test::random_activations;
using test::random_rows;

constexpr DType kTypes[] = {DType::Q4_1, DType::Q5_1};
// nb = 1 and 3 (odd: a padding block), 2 (tail only), 6 (tail only), 8 (one
// full group), 18 (2 groups + tail 2), 19 (odd), 48.
constexpr int64_t kCols[] = {32, 96, 64, 192, 256, 576, 608, 1536};

// The SIMD kernels this CPU can run, by name.
std::vector<std::pair<const char*, SimdLevel>> variants() {
  std::vector<std::pair<const char*, SimdLevel>> v;
  for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512Vnni})
    if (simd_supported(l)) v.emplace_back(simd_level_name(l), l);
  return v;
}

GemmFn kernel(SimdLevel level, DType type) { return kernels_at(level).gemm_for(type); }

TEST(SplitLayout, RepackKeepsEveryValue) {
  std::mt19937 rng(3);
  for (DType type : kTypes)
    for (int64_t cols : kCols) {
      const int64_t rows = 3, nb = split_blocks(cols);
      const auto native = random_rows(type, rows, cols, rng);
      const test::LaidOut s = test::lay_out(type, rows, cols, native);
      const auto& tr = traits(type);
      const int qsb = 16;
      std::vector<float> want(cols), got(cols);
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, native.data() + r * row_bytes(type, cols), want.data(), cols);
        dequantize_split_row(s.w, r, got.data());
        ASSERT_EQ(want, got) << dtype_name(type) << " cols " << cols << " row " << r;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t quants[32], zero[32] = {};
          split_block_quants(type, s.w.row(r), nb, b, quants);
          if (b == cols / 32) {  // the padding block of an odd count
            ASSERT_EQ(std::memcmp(quants, zero, qsb), 0) << dtype_name(type) << " cols " << cols;
            continue;
          }
          const uint8_t* blk = native.data() + r * row_bytes(type, cols) + b * tr.type_size;
          ASSERT_EQ(std::memcmp(quants, blk + tr.type_size - qsb, qsb), 0) << dtype_name(type) << " block " << b;
          if (type == DType::Q5_1) {
            uint32_t qh;
            std::memcpy(&qh, blk + tr.type_size - qsb - 4, 4);
            ASSERT_EQ(split_block_high_bits(type, s.w.row(r), nb, b), qh) << dtype_name(type) << " block " << b;
          }
        }
      }
    }
}

TEST(SplitLayout, SimdMatchesScalarReference) {
  if (variants().empty()) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(7);
  for (DType type : kTypes)
    for (int64_t cols : kCols)
      for (int64_t rows : {1, 5, 13})
        for (int64_t tokens : {1, 3, 17}) {
          const test::LaidOut s = test::lay_out(type, rows, cols, random_rows(type, rows, cols, rng));
          const auto x = random_activations(tokens, cols, rng);
          const auto ref = test::run_gemm(gemm_split_scalar, s.w, x, tokens);
          for (const auto& [name, level] : variants()) {
            const auto got = test::run_gemm(kernel(level, type), s.w, x, tokens);
            for (size_t i = 0; i < ref.size(); ++i)
              ASSERT_NEAR(got[i], ref[i], 1e-4f * (1 + std::fabs(ref[i])))
                  << name << " " << dtype_name(type) << " " << rows << "x" << cols << " tokens " << tokens << " at " << i;
          }
        }
}

// Every quant at the top of its range and activations of magnitude 127: the
// integer sums reach their bounds (AVX2 keeps up to 8 Q4 or 4 Q5 products in
// 16 bits) and must still equal the scalar reference's.
TEST(SplitLayout, LargestMagnitudesMatchScalarReference) {
  for (DType type : kTypes)
    for (int64_t cols : kCols) {
      const int64_t rows = 5, tokens = 6;
      const test::LaidOut s = test::lay_out(type, rows, cols, extreme_rows(type, rows, cols));
      const auto x = extreme_activations(tokens, cols);
      const auto ref = test::run_gemm(gemm_split_scalar, s.w, x, tokens);
      for (const auto& [name, level] : variants()) {
        const auto got = test::run_gemm(kernel(level, type), s.w, x, tokens);
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])))
              << name << " " << dtype_name(type) << " cols " << cols << " at " << i;
      }
    }
}

TEST(SplitLayout, VariantsAreBitIdentical) {
  const auto v = variants();
  if (v.size() < 2) GTEST_SKIP() << "CPU has a single SIMD variant";
  std::mt19937 rng(8);
  for (DType type : kTypes)
    for (int64_t cols : kCols) {
      const int64_t rows = 11, tokens = 6;
      const test::LaidOut s = test::lay_out(type, rows, cols, random_rows(type, rows, cols, rng));
      const auto x = random_activations(tokens, cols, rng);
      const auto first = test::run_gemm(kernel(v[0].second, type), s.w, x, tokens);
      for (size_t i = 1; i < v.size(); ++i)
        EXPECT_EQ(test::run_gemm(kernel(v[i].second, type), s.w, x, tokens), first) << v[i].first << " vs " << v[0].first << " "
                                                                  << dtype_name(type) << " cols " << cols;
    }
}

// The activation pack's quants start on a cache line for every token (the
// AVX-512 kernels' 64-byte loads must not split), and packing token ranges
// separately (prepare + pack_tokens, as threads do) gives build()'s bytes.
TEST(SplitLayout, ActivationPackIsLineAlignedAndPacksInRanges) {
  std::mt19937 rng(10);
  for (int64_t cols : kCols) {
    const int64_t tokens = 7;
    const auto x = random_activations(tokens, cols, rng);
    const ActivationPack whole = ActivationPack::of(x.data(), tokens, cols / 32);
    ActivationPack parts;
    parts.prepare(x.data(), tokens, cols / 32);
    parts.pack_tokens(3, tokens);
    parts.pack_tokens(0, 3);
    for (int64_t t = 0; t < tokens; ++t)
      EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.q_at(t, 0)) % 64, 0u) << "cols " << cols << " token " << t;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.d.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.s.data()) % 64, 0u);
    EXPECT_TRUE(std::equal(whole.q.begin(), whole.q.end(), parts.q.begin(), parts.q.end())) << "cols " << cols;
    EXPECT_TRUE(std::equal(whole.d.begin(), whole.d.end(), parts.d.begin(), parts.d.end())) << "cols " << cols;
    EXPECT_TRUE(std::equal(whole.s.begin(), whole.s.end(), parts.s.begin(), parts.s.end())) << "cols " << cols;
  }
}

// Prefill tiles (1 row x 4/2/1 tokens) and decode tiles (4 rows x 1 token) give
// the same bits, whatever the row range a thread gets.
TEST(SplitLayout, ResultsDoNotDependOnTokenCountOrRowRange) {
  std::mt19937 rng(9);
  for (const auto& [name, level] : variants())
    for (DType type : kTypes) {
      const GemmFn fn = kernel(level, type);
      const int64_t rows = 23, cols = 576, tokens = 19;
      const test::LaidOut s = test::lay_out(type, rows, cols, random_rows(type, rows, cols, rng));
      const auto x = random_activations(tokens, cols, rng);
      test::expect_same_bits_per_token_and_row_range(fn, s.w, x, tokens, std::string(name) + " " + std::string(dtype_name(type)));
    }
}

}  // namespace
}  // namespace tally
