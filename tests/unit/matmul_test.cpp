// Activation quantization and the matrix products, through the kernel table
// (kernel_table.h), for every weight type the engine multiplies and every
// instruction-set level this CPU runs:
//  - the quantizer of each level against its scalar reference, bit for bit;
//  - every product against an independent reference: the same product in
//    double on the weights dequantized by the dequantizers (themselves
//    bit-exact against gguf-py) and on the quantized activations, and against
//    float math on the original activations within the quantization's bound;
//  - odd shapes (row counts, block counts that leave a padding block);
//  - threads and token counts only split the work: the bits do not change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/activation_pack.h"
#include "kernels/activation_q8.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "test_util.h"

namespace tally {
namespace {

// The levels this CPU can run, scalar first.
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> v;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512Vnni})
    if (simd_supported(l)) v.push_back(l);
  return v;
}

float uniform(std::mt19937& rng, float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

// n activations, block by block of a randomly chosen kind, so that every run
// mixes ordinary blocks with the edge cases of the quantizer.
std::vector<float> make_activations(int64_t n, std::mt19937& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> gauss(0, 1);
  for (int64_t b = 0; b < n / 32; ++b) {
    float* xb = x.data() + b * 32;
    const int kind = static_cast<int>(rng() % 9);
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    for (int i = 0; i < 32; ++i) {
      switch (kind) {
        case 0: xb[i] = gauss(rng) * std::pow(10.0f, uniform(rng, -3, 3)); break;  // ordinary
        case 1: xb[i] = 0; break;                                                   // zeros
        case 2: xb[i] = (rng() % 2 ? 1 : -1) * uniform(rng, 1e30f, 3e38f); break;  // huge
        case 3: xb[i] = (rng() % 2 ? 1 : -1) * uniform(rng, 1e-30f, 1e-20f); break;  // tiny
        case 4: xb[i] = sign * 0.3f; break;                                          // all equal
        case 5: xb[i] = i == 7 ? 127.0f : static_cast<float>(static_cast<int>(rng() % 255) - 127) + 0.5f;
          break;  // amax 127 -> d == 1: every value is a rounding tie
        case 6: xb[i] = i == 13 ? sign * 5.0f : 0.0f; break;  // one non-zero value
        case 7: xb[i] = rng() % 3 == 0 ? 0.0f : gauss(rng); break;  // sparse
        default: xb[i] = sign * uniform(rng, 0, 1); break;            // one sign
      }
    }
  }
  return x;
}

std::string block_text(const BlockQ8& b) {
  std::string s = "d=" + std::to_string(b.d) + " s=" + std::to_string(b.s) + " q=";
  for (int i = 0; i < 32; ++i) s += std::to_string(b.q[i]) + " ";
  return s;
}

// Every SIMD level's quantizer equals the scalar reference bit for bit, at
// every size and alignment, on blocks with every edge case of the quantizer.
TEST(QuantizeQ8, EveryLevelMatchesScalarBitForBit) {
  std::mt19937 rng(1);
  for (SimdLevel level : levels()) {
    if (level == SimdLevel::Scalar) continue;
    for (int64_t k = 1; k <= 37; ++k) {
      const int64_t n = 32 * k;
      const std::vector<float> src = make_activations(n, rng);
      for (int off = 0; off < 8; ++off) {  // float offsets: every alignment mod 32 bytes
        std::vector<float> buf(n + 8);
        std::copy(src.begin(), src.end(), buf.begin() + off);
        std::vector<BlockQ8> a(k), s(k);
        kernels_at(level).quantize_q8(buf.data() + off, a.data(), n);
        quantize_row_q8_scalar(buf.data() + off, s.data(), n);
        for (int64_t b = 0; b < k; ++b)
          ASSERT_EQ(std::memcmp(&a[b], &s[b], sizeof(BlockQ8)), 0)
              << simd_level_name(level) << " n=" << n << " offset=" << off << " block " << b << "\n"
              << block_text(a[b]) << "\nscalar: " << block_text(s[b]);
      }
    }
  }
}

// What the quantizer promises, checked on the scalar reference: q in
// [-127, 127], d = max|x| / 127, |x - d q| <= d / 2 (round to nearest),
// s = d * sum(q), ties to even. (x * (1/d) is rounded twice before it is
// rounded to an integer: about 2 * 127 ulps of slack on the 0.5.)
TEST(QuantizeQ8, ScalarMeetsItsContract) {
  std::mt19937 rng(2);
  const int64_t n = 32 * 64;
  const std::vector<float> x = make_activations(n, rng);
  std::vector<BlockQ8> q(n / 32);
  quantize_row_q8_scalar(x.data(), q.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    EXPECT_EQ(q[b].d, amax / 127.0f) << "block " << b;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const double xi = x[b * 32 + i], dq = static_cast<double>(q[b].d) * q[b].q[i];
      EXPECT_GE(q[b].q[i], -127);
      EXPECT_LE(std::fabs(xi - dq), q[b].d * (0.5 + 1e-4)) << "block " << b << " value " << i;
      sum += q[b].q[i];
    }
    EXPECT_EQ(q[b].s, q[b].d * static_cast<float>(sum)) << "block " << b;
  }
  // Ties round to even: with max|x| == 127, d == 1 and q = nearbyint(x).
  float tie[32];
  for (int i = 0; i < 32; ++i) tie[i] = static_cast<float>(i) - 16.5f;
  tie[31] = 127;
  BlockQ8 t;
  quantize_row_q8_scalar(tie, &t, 32);
  ASSERT_EQ(t.d, 1.0f);
  EXPECT_EQ(t.q[0], -16);  // -16.5
  EXPECT_EQ(t.q[1], -16);  // -15.5
  EXPECT_EQ(t.q[2], -14);  // -14.5
  EXPECT_EQ(t.q[16], 0);   // -0.5
  EXPECT_EQ(t.q[17], 0);   // 0.5
  EXPECT_EQ(t.q[18], 2);   // 1.5
}

// A block whose largest magnitude is below 127 * FLT_MIN has a subnormal scale
// whose inverse overflows to infinity; the quantizer must still produce valid
// codes (|q| <= 127, |x - d q| <= max|x|), and every level must agree.
TEST(QuantizeQ8, SubnormalScaleBlock) {
  float x[64];
  for (int i = 0; i < 32; ++i) x[i] = (i % 3 == 0 ? 0.0f : 1e-38f) * (i % 2 ? 1 : -1);
  for (int i = 32; i < 64; ++i) x[i] = static_cast<float>(i - 40);  // an ordinary block after it
  BlockQ8 s[2];
  quantize_row_q8_scalar(x, s, 64);
  for (int i = 0; i < 32; ++i) {
    EXPECT_GE(s[0].q[i], -127) << i;
    EXPECT_LE(std::fabs(static_cast<double>(x[i]) - static_cast<double>(s[0].d) * s[0].q[i]), 1e-38f) << i;
  }
  EXPECT_TRUE(std::isfinite(s[0].s));
  for (SimdLevel level : levels()) {
    BlockQ8 a[2];
    kernels_at(level).quantize_q8(x, a, 64);
    EXPECT_EQ(std::memcmp(a, s, sizeof(a)), 0)
        << simd_level_name(level) << ": " << block_text(a[0]) << "\nscalar: " << block_text(s[0]);
  }
}

// --- weight rows --------------------------------------------------------------

// Byte offsets of the fp16 fields (scales, mins) inside one block of `type`.
std::vector<int> f16_fields(DType type) {
  switch (type) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// A row of n values of `type` made of random bytes, with every fp16 field set
// to a finite value (random bytes would give inf/NaN scales), written at `dst`.
void fill_weight_row(DType type, int64_t n, std::mt19937& rng, uint8_t* dst) {
  const auto& tr = traits(type);
  const uint64_t bytes = row_bytes(type, n);
  std::normal_distribution<float> gauss(0, 1);
  if (type == DType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = gauss(rng);
      std::memcpy(dst + 4 * i, &v, 4);
    }
    return;
  }
  if (type == DType::F16 || type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = gauss(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = type == DType::F16 ? f32_to_f16(v) : static_cast<uint16_t>(bits >> 16);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  for (uint64_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
  for (uint64_t b = 0; b < bytes / tr.type_size; ++b)
    for (int f : f16_fields(type)) put_f16(dst + b * tr.type_size + f, uniform(rng, -0.05f, 0.05f));
}

// |min| of the 32-value block holding value i for the formats with one (Q4_1,
// Q5_1: m; Q4_K, Q5_K: dmin times the sub-block's min), 0 for the others: the
// kernels add min * sum(x) apart from the d q products.
double block_min_abs(DType type, const uint8_t* w, int64_t i) {
  const bool k = type == DType::Q4_K || type == DType::Q5_K;
  if (type != DType::Q4_1 && type != DType::Q5_1 && !k) return 0;
  const auto& tr = traits(type);
  const uint8_t* blk = w + i / tr.block_size * tr.type_size;
  uint16_t h;  // m, or dmin
  std::memcpy(&h, blk + 2, 2);
  if (!k) return std::fabs(f16_to_f32(h));
  uint8_t sc, mn;
  unpack_k_scale_min(blk + 4, static_cast<int>(i % 256 / 32), &sc, &mn);
  return std::fabs(f16_to_f32(h)) * mn;
}

struct DotReference {
  double exact;  // sum w_i * (d_b q_i): the dot the kernel computes, in double
  double terms;  // sum of |terms| that the kernel adds in float (bounds its rounding)
};

DotReference dot_with_quantized(DType type, const uint8_t* w, const BlockQ8* xq, int64_t n) {
  std::vector<float> wd(n);
  dequantize_row(type, w, wd.data(), n);
  DotReference r{0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const double xv = static_cast<double>(xq[i / 32].d) * xq[i / 32].q[i % 32];
    r.exact += wd[i] * xv;
    // |d q + m| <= |d q| + |m| and |d q| <= |d q + m| + |m|.
    r.terms += (std::fabs(wd[i]) + 2 * block_min_abs(type, w, i)) * std::fabs(xv);
  }
  return r;
}

// --- matrix products ------------------------------------------------------------

constexpr DType kEngineTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                  DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// A random matrix of `type` in its kernels' layout (storage keeps it alive).
struct Matrix {
  std::vector<uint8_t> native;
  LineBytes storage;
  WeightMatrix w;
  Matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng) : native(row_bytes(type, cols) * rows + 3) {
    uint8_t* base = native.data() + 3;  // GGUF rows need not be aligned
    for (int64_t r = 0; r < rows; ++r) fill_weight_row(type, cols, rng, base + r * row_bytes(type, cols));
    w = make_weight_matrix(type, rows, cols, base, storage);
  }
  const uint8_t* native_row(int64_t r) const { return native.data() + 3 + r * row_bytes(w.type, w.cols); }
};

// Column counts: block counts even and odd (a split row then has a padding
// block), one and several 256-value super-blocks.
std::vector<int64_t> cols_for(DType type) {
  if (traits(type).block_size == 256) return {256, 512, 768};
  return {32, 96, 160, 256, 576, 608};
}

std::vector<float> product(const KernelTable& k, const WeightMatrix& w, const std::vector<BlockQ8>& xq, int64_t tokens,
                           ThreadPool& pool) {
  const ActivationPack pack = ActivationPack::of(xq.data(), tokens, w.cols / 32);
  std::vector<float> y(static_cast<size_t>(w.rows * tokens), std::numeric_limits<float>::quiet_NaN());
  test::SimdLevelScope scope(k.level);
  matmul(w, pack, y.data(), pool);
  return y;
}

// Every level's product of every type against (a) the same product in double
// on the dequantized weights and the quantized activations (only float
// rounding may differ: 1e-5 of the sum of |terms|), and (b) the original float
// activations. For (b), round-to-nearest quantization moves each x_i by at most
// d_b / 2 = max|x|_b / 254, so
//   |err| <= sum_b (max|x|_b / 254) * sum_{i in b} |w_i|   (+ the rounding of (a)).
TEST(Matmul, EveryLevelMatchesDequantizedProductInDouble) {
  std::mt19937 rng(4);
  std::normal_distribution<float> gauss(0, 1);
  ThreadPool pool(2);
  for (DType type : kEngineTypes)
    for (int64_t cols : cols_for(type)) {
      const int64_t rows = 5, tokens = 3;
      const Matrix m(type, rows, cols, rng);
      std::vector<float> x(static_cast<size_t>(tokens * cols));
      for (int64_t b = 0; b < tokens * cols / 32; ++b) {
        const float scale = std::pow(10.0f, uniform(rng, -2, 2));
        for (int i = 0; i < 32; ++i) x[b * 32 + i] = gauss(rng) * scale;
      }
      std::vector<BlockQ8> xq(x.size() / 32);
      quantize_row_q8_scalar(x.data(), xq.data(), static_cast<int64_t>(x.size()));
      for (SimdLevel level : levels()) {
        const auto y = product(kernels_at(level), m.w, xq, tokens, pool);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const std::string where = std::string(simd_level_name(level)) + " " + std::string(dtype_name(type)) +
                                      " cols " + std::to_string(cols) + " row " + std::to_string(r) + " token " +
                                      std::to_string(t);
            const float got = y[t * rows + r];
            const uint8_t* w = m.native_row(r);
            const DotReference q = dot_with_quantized(type, w, xq.data() + t * (cols / 32), cols);
            const double tol_a = 1e-5 * q.terms + 1e-30;
            ASSERT_LE(std::fabs(got - q.exact), tol_a) << where << ": got " << got << ", double " << q.exact;
            std::vector<float> wd(cols);
            dequantize_row(type, w, wd.data(), cols);
            double exact = 0, bound = 0;
            for (int64_t b = 0; b < cols / 32; ++b) {
              double amax = 0, wsum = 0;
              for (int i = 0; i < 32; ++i) {
                const float xi = x[t * cols + b * 32 + i];
                exact += static_cast<double>(wd[b * 32 + i]) * xi;
                amax = std::max(amax, std::fabs(static_cast<double>(xi)));
                wsum += std::fabs(wd[b * 32 + i]) + 2 * block_min_abs(type, w, b * 32 + i);
              }
              bound += amax / 254 * wsum;
            }
            ASSERT_LE(std::fabs(got - exact), bound * (1 + 1e-4) + tol_a)
                << where << ": got " << got << ", float math " << exact;
          }
      }
    }
}

// At every level, threads only split rows and a prefill only batches tokens:
// 1, 2 or 3 threads and n tokens at once or one at a time give the same bits.
// The token counts take every tile shape (8 or 4 tokens, then 3, 2 or 1).
TEST(Matmul, ThreadsAndTokenCountDoNotChangeTheBits) {
  std::mt19937 rng(5);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (DType type : kEngineTypes)
    for (int64_t rows : {1, 5, 37})
      for (int64_t tokens : {2, 3, 6, 13}) {
        const int64_t cols = traits(type).block_size == 256 ? 256 : 160;
        const Matrix m(type, rows, cols, rng);
        std::vector<float> x = make_activations(cols * tokens, rng);
        for (float& v : x)  // keep the products finite
          if (std::fabs(v) > 1e6f) v = std::copysign(1e6f, v);
        std::vector<BlockQ8> xq(cols / 32 * tokens);
        quantize_row_q8_scalar(x.data(), xq.data(), cols * tokens);
        for (SimdLevel level : levels()) {
          const auto want = product(kernels_at(level), m.w, xq, tokens, pools[0]);
          for (auto& pool : pools)
            ASSERT_EQ(product(kernels_at(level), m.w, xq, tokens, pool), want)
                << simd_level_name(level) << " " << dtype_name(type) << " rows " << rows << " tokens " << tokens
                << " threads " << pool.size();
          for (int64_t t = 0; t < tokens; ++t) {
            const std::vector<BlockQ8> one(xq.begin() + t * (cols / 32), xq.begin() + (t + 1) * (cols / 32));
            const auto y = product(kernels_at(level), m.w, one, 1, pools[1]);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(y[r], want[t * rows + r]) << simd_level_name(level) << " " << dtype_name(type) << " token " << t;
          }
        }
      }
}

TEST(Matmul, TypesWithoutAProductAreRefused) {
  EXPECT_TRUE(matmul_supported(DType::Q4_K));
  EXPECT_FALSE(matmul_supported(DType::Q2_K));
  EXPECT_FALSE(matmul_supported(DType::IQ4_NL));
}

}  // namespace
}  // namespace tally
