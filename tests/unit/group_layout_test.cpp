// The row-group layout (group_layout.h): repacking keeps every value and pads
// with zeros; the kernels of each SIMD level (AVX2, AVX-VNNI, AVX-512 VNNI,
// each tested directly where the CPU has it) give the scalar twin's bits
// exactly (random inputs, and the largest magnitudes, where AVX2's 16-bit
// pair sums come closest to saturating; row counts that leave partial
// groups), whatever the tile shape, token count or row range. matmul_test.cpp
// checks the twin against the dequantized product in double.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"
#include "kernels/group_layout.h"
#include "kernels/kernel_table.h"
#include "gemm_checks.h"
#include "random_blocks.h"

namespace tally {
namespace {

constexpr DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                            DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
constexpr int64_t kCols[] = {32, 64, 96, 576, 608, 1536};
// K-quant rows are whole super-blocks: 1, 2, 3 (an odd count leaves half a
// record) and 6 (SmolLM2's feed-forward width).
constexpr int64_t kSuperCols[] = {256, 512, 768, 1536};

std::vector<int64_t> cols_of(DType type) {
  if (group_geometry(type).kquant()) return {std::begin(kSuperCols), std::end(kSuperCols)};
  return {std::begin(kCols), std::end(kCols)};
}

std::vector<std::pair<const char*, SimdLevel>> variants() {
  std::vector<std::pair<const char*, SimdLevel>> v;
  for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512Vnni})
    if (simd_supported(l)) v.emplace_back(simd_level_name(l), l);
  return v;
}

TEST(GroupLayout, RepackKeepsEveryValueAndPadsWithZeros) {
  std::mt19937 rng(3);
  for (DType type : kTypes)
    for (int64_t cols : cols_of(type))
      for (int64_t rows : {1, 16, 21}) {
        const std::string what = std::string(dtype_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        const GroupGeometry geo = group_geometry(type);
        const auto native = test::random_rows(type, rows, cols, rng);
        const test::LaidOut m = test::lay_out(type, rows, cols, native);
        ASSERT_EQ(m.w.layout, RowLayout::Group) << what;
        ASSERT_EQ(reinterpret_cast<uintptr_t>(m.w.data) % 64, 0u) << what << ": quant loads must not split lines";
        std::vector<float> want(cols), got(cols);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, native.data() + r * row_bytes(type, cols), want.data(), cols);
          dequantize_group_row(m.w, r, got.data());
          ASSERT_EQ(want, got) << what << " row " << r;
        }
        const int64_t groups = (rows + 15) / 16, bytes = static_cast<int64_t>(group_bytes(geo, cols));
        ASSERT_EQ(16 * m.w.row_bytes, static_cast<uint64_t>(bytes)) << what;
        ASSERT_EQ(group_matrix_bytes(type, rows, cols), static_cast<uint64_t>(groups * bytes)) << what;
        // Zero: the rows past the matrix in the last group, and the blocks that
        // complete the last record in every group.
        const int64_t nb = cols / 32, B = geo.record_blocks;
        auto zero = [&](int64_t g, int64_t b, int i) {
          const uint8_t* group = m.w.data + g * bytes;
          const auto where = [&] { return what + " group " + std::to_string(g) + " row " + std::to_string(i) +
                                          " block " + std::to_string(b); };
          uint16_t d, mn = 0;
          if (geo.kquant()) {  // the byte-wide scales (and mins) and the super-block's d (and dmin)
            ASSERT_EQ(group[group_scale_offset(geo, b, i)], 0) << where();
            ASSERT_EQ(group[group_min_offset(geo, b, i)], 0) << where();
            std::memcpy(&d, group + group_d_offset(geo, b, i), 2);
            if (geo.mins) std::memcpy(&mn, group + group_dmin_offset(geo, b, i), 2);
          } else {
            std::memcpy(&d, group + group_scale_offset(geo, b, i), 2);
            if (geo.mins) std::memcpy(&mn, group + group_min_offset(geo, b, i), 2);
          }
          ASSERT_EQ(d, 0) << where();
          ASSERT_EQ(mn, 0) << where();
          for (int k = 0; k < geo.qh_bytes / 4; ++k) {
            uint32_t h;
            std::memcpy(&h, group + group_high_offset(geo, b, i) + 64 * k, 4);
            ASSERT_EQ(h, 0u) << where();
          }
          for (int k = 0; k < geo.qs_bytes / 4; ++k) {
            uint32_t q;
            std::memcpy(&q, group + group_quant_offset(geo, b, k, i), 4);
            ASSERT_EQ(q, 0u) << where();
          }
        };
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t b = nb; b % B != 0; ++b)
            for (int i = 0; i < 16; ++i) zero(g, b, i);
        for (int64_t b = 0; b < nb; ++b)
          for (int i = static_cast<int>(rows - (groups - 1) * 16); i < 16; ++i) zero(groups - 1, b, i);
      }
}

TEST(GroupLayout, RowsOfPartialBlocksAreRefused) {
  std::vector<uint8_t> native(1024);
  LineBytes storage;
  EXPECT_THROW(make_weight_matrix(DType::Q4_K, 1, 576, native.data(), storage), Error);  // 2.25 super-blocks
  EXPECT_THROW(make_weight_matrix(DType::Q6_K, 1, 320, native.data(), storage), Error);
  EXPECT_FALSE(group_supported(DType::F16));
  EXPECT_FALSE(group_supported(DType::Q2_K));  // no kernel: the engine refuses the file's matrices
}

TEST(GroupLayout, EveryLevelGivesTheScalarTwinsBits) {
  if (variants().empty()) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(7);
  for (DType type : kTypes)
    for (bool extreme : {false, true})
      for (int64_t cols : cols_of(type))
        for (int64_t rows : {5, 16, 40})
          for (int64_t tokens : {1, 3, 13, 17}) {  // 13: tiles of 8, 4 and 1 token
            const auto native = extreme ? test::extreme_rows(type, rows, cols) : test::random_rows(type, rows, cols, rng);
            const auto x = extreme ? test::extreme_activations(tokens, cols) : test::random_activations(tokens, cols, rng);
            const test::LaidOut m = test::lay_out(type, rows, cols, native);
            const auto ref = test::run_gemm(gemm_group_scalar, m.w, x, tokens);
            for (const auto& [name, level] : variants())
              ASSERT_EQ(test::run_gemm(kernels_at(level).gemm_for(type), m.w, x, tokens), ref)
                  << name << " " << dtype_name(type) << (extreme ? " extreme " : " ") << rows << "x" << cols
                  << " tokens " << tokens;
          }
}

TEST(GroupLayout, ResultsDoNotDependOnTokenCountOrRowRange) {
  std::mt19937 rng(9);
  for (DType type : kTypes) {
    const int64_t rows = 37, cols = group_geometry(type).kquant() ? 768 : 576, tokens = 29;  // 16 + 13 (8 + 4 + 1)
    const test::LaidOut m = test::lay_out(type, rows, cols, test::random_rows(type, rows, cols, rng));
    const auto x = test::random_activations(tokens, cols, rng);
    const std::string t(dtype_name(type));
    test::expect_same_bits_per_token_and_row_range(gemm_group_scalar, m.w, x, tokens, "scalar " + t);
    for (const auto& [name, level] : variants())
      test::expect_same_bits_per_token_and_row_range(kernels_at(level).gemm_for(type), m.w, x, tokens, name + (" " + t));
  }
}

}  // namespace
}  // namespace tally
