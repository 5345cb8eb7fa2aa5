// Activation quantization and the Q8-activation dot kernels:
//  - the AVX2 variants against their scalar reference (quantization bit-exact,
//    dots within float reordering), over odd sizes and misaligned weights;
//  - the scalar kernels against float math on dequantized weights, for every
//    supported weight type;
//  - matmul on 1..3 threads against the one-thread reference, bit-exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/activation_q8.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"
#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "test_util.h"
#include "core/thread_pool.h"

namespace tally {
namespace {

bool have_avx2() { return simd_supported(SimdLevel::Avx2); }

// Forces a SIMD level for one test and restores the previous one.
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

TEST(QuantizeQ8, Avx2MatchesScalarBitForBit) {
  if (!have_avx2()) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(1);
  for (int64_t k = 1; k <= 37; ++k) {
    const int64_t n = 32 * k;
    const std::vector<float> src = make_activations(n, rng);
    for (int off = 0; off < 8; ++off) {  // float offsets: every alignment mod 32 bytes
      std::vector<float> buf(n + 8);
      std::copy(src.begin(), src.end(), buf.begin() + off);
      std::vector<BlockQ8> a(k), s(k);
      quantize_row_q8_avx2(buf.data() + off, a.data(), n);
      quantize_row_q8_scalar(buf.data() + off, s.data(), n);
      for (int64_t b = 0; b < k; ++b)
        ASSERT_EQ(std::memcmp(&a[b], &s[b], sizeof(BlockQ8)), 0)
            << "n=" << n << " offset=" << off << " block " << b << "\navx2:   " << block_text(a[b])
            << "\nscalar: " << block_text(s[b]);
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
// codes (|q| <= 127, |x - d q| <= max|x|), and both variants must agree.
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
  if (have_avx2()) {
    BlockQ8 a[2];
    quantize_row_q8_avx2(x, a, 64);
    EXPECT_EQ(std::memcmp(a, s, sizeof(a)), 0) << "avx2:   " << block_text(a[0]) << "\nscalar: " << block_text(s[0]);
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

// |m| of the 32-value block holding value i for the formats with an offset
// (Q4_1, Q5_1), 0 for the others: the kernels add m * sum(x) separately.
double block_min_abs(DType type, const uint8_t* w, int64_t i) {
  if (type != DType::Q4_1 && type != DType::Q5_1) return 0;
  uint16_t h;
  std::memcpy(&h, w + (i / 32) * traits(type).type_size + 2, 2);
  return std::fabs(f16_to_f32(h));
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

// --- AVX2 dots against the scalar reference -----------------------------------

struct Avx2Case {
  DType type;
  VecDotFn avx2, scalar;
};

TEST(VecDot, Avx2MatchesScalarAtEverySizeAndAlignment) {
  if (!have_avx2()) GTEST_SKIP() << "CPU has no AVX2";
  const Avx2Case cases[] = {
      {DType::Q4_0, vec_dot_q4_0_q8_avx2, vec_dot_q4_0_q8_scalar},
      {DType::Q4_1, vec_dot_q4_1_q8_avx2, vec_dot_q4_1_q8_scalar},
      {DType::Q8_0, vec_dot_q8_0_q8_avx2, vec_dot_q8_0_q8_scalar},
  };
  std::mt19937 rng(3);
  for (const auto& c : cases) {
    for (int64_t k = 1; k <= 40; ++k) {
      const int64_t n = 32 * k;
      const uint64_t bytes = row_bytes(c.type, n);
      std::vector<float> x = make_activations(n, rng);
      for (float& v : x)  // keep the dot finite: huge blocks would overflow the sum
        if (std::fabs(v) > 1e6f) v = std::copysign(1e6f, v);
      std::vector<BlockQ8> xq(k);
      quantize_row_q8_scalar(x.data(), xq.data(), n);
      for (int off = 1; off <= 7; ++off) {
        std::vector<uint8_t> buf(bytes + 8);
        uint8_t* w = buf.data() + off;
        fill_weight_row(c.type, n, rng, w);
        const float a = c.avx2(w, xq.data(), n);
        const float s = c.scalar(w, xq.data(), n);
        const DotReference ref = dot_with_quantized(c.type, w, xq.data(), n);
        const double tol = 1e-5 * ref.terms;
        EXPECT_LE(std::fabs(static_cast<double>(a) - s), tol)
            << dtype_name(c.type) << " n=" << n << " offset=" << off << ": avx2 " << a << " scalar " << s;
        EXPECT_LE(std::fabs(s - ref.exact), tol) << dtype_name(c.type) << " n=" << n << " scalar vs double";
      }
    }
  }
}

TEST(VecDot, DispatchFollowsSimdLevel) {
  {
    test::SimdLevelScope scalar(SimdLevel::Scalar);
    EXPECT_EQ(vec_dot_fn(DType::Q4_0), &vec_dot_q4_0_q8_scalar);
    EXPECT_EQ(vec_dot_fn(DType::Q8_0), &vec_dot_q8_0_q8_scalar);
  }
  if (have_avx2()) {
    test::SimdLevelScope avx2(SimdLevel::Avx2);
    EXPECT_EQ(vec_dot_fn(DType::Q4_1), &vec_dot_q4_1_q8_avx2);
  }
  EXPECT_THROW(vec_dot_fn(DType::Q2_K), Error);
  EXPECT_THROW(vec_dot_fn_scalar(DType::IQ4_NL), Error);
}

// --- scalar kernels against float math ----------------------------------------

// Every supported type: the kernel's result against (a) the same dot in double
// on the dequantized weights and the quantized activations (only float rounding
// may differ: 1e-5 of the sum of |terms|), and (b) against the original float
// activations. For (b), round-to-nearest quantization moves each x_i by at most
// d_b / 2 = max|x|_b / 254 (d_b = max|x|_b / 127), so
//   |err| <= sum_b (max|x|_b / 254) * sum_{i in b} |w_i|   (+ the rounding of (a)),
// a bound below 2^-7 * sum|w_i| * max|x|.
TEST(VecDot, ScalarKernelsMatchDequantizedMath) {
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  std::mt19937 rng(4);
  std::normal_distribution<float> gauss(0, 1);
  for (DType type : types) {
    for (int64_t n : {256, 512, 768}) {
      std::vector<uint8_t> buf(row_bytes(type, n) + 3);
      uint8_t* w = buf.data() + 3;  // GGUF rows need not be aligned
      fill_weight_row(type, n, rng, w);
      std::vector<float> x(n);
      for (int64_t b = 0; b < n / 32; ++b) {
        const float scale = std::pow(10.0f, uniform(rng, -2, 2));
        for (int i = 0; i < 32; ++i) x[b * 32 + i] = gauss(rng) * scale;
      }
      std::vector<BlockQ8> xq(n / 32);
      quantize_row_q8_scalar(x.data(), xq.data(), n);
      const float got = vec_dot_fn_scalar(type)(w, xq.data(), n);

      const DotReference q = dot_with_quantized(type, w, xq.data(), n);
      const double tol_a = 1e-5 * q.terms;
      EXPECT_LE(std::fabs(got - q.exact), tol_a) << dtype_name(type) << " n=" << n << ": got " << got
                                                  << ", double on quantized activations " << q.exact;

      std::vector<float> wd(n);
      dequantize_row(type, w, wd.data(), n);
      double exact = 0, bound = 0;
      for (int64_t b = 0; b < n / 32; ++b) {
        double amax = 0, wsum = 0;
        for (int i = 0; i < 32; ++i) {
          exact += static_cast<double>(wd[b * 32 + i]) * x[b * 32 + i];
          amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + i])));
          wsum += std::fabs(wd[b * 32 + i]) + 2 * block_min_abs(type, w, b * 32 + i);
        }
        bound += amax / 254 * wsum;
      }
      EXPECT_LE(std::fabs(got - exact), bound * (1 + 1e-4) + tol_a)
          << dtype_name(type) << " n=" << n << ": got " << got << ", float math " << exact;
    }
  }
}

// --- matmul -------------------------------------------------------------------

TEST(Matmul, ThreadedEqualsReferenceBitForBit) {
  test::SimdLevelScope scalar(SimdLevel::Scalar);
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};
  std::mt19937 rng(5);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  const int64_t cols = 256;
  for (DType type : types) {
    for (int64_t rows : {1, 5, 16, 37, 50}) {
      WeightMatrix m;
      m.type = type;
      m.rows = rows;
      m.cols = cols;
      m.row_bytes = row_bytes(type, cols);
      std::vector<uint8_t> data(m.row_bytes * rows);
      for (int64_t r = 0; r < rows; ++r) fill_weight_row(type, cols, rng, data.data() + r * m.row_bytes);
      m.data = data.data();
      for (int64_t n_tokens : {1, 3}) {
        std::vector<float> x = make_activations(cols * n_tokens, rng);
        for (float& v : x)
          if (std::fabs(v) > 1e6f) v = std::copysign(1e6f, v);
        std::vector<BlockQ8> xq(cols / 32 * n_tokens);
        quantize_row_q8(x.data(), xq.data(), cols * n_tokens);
        std::vector<float> want(rows * n_tokens);
        matmul_reference(m, xq.data(), n_tokens, want.data());
        for (auto& pool : pools) {
          std::vector<float> got(rows * n_tokens, std::numeric_limits<float>::quiet_NaN());
          matmul(m, xq.data(), n_tokens, got.data(), pool);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << dtype_name(type) << " rows=" << rows << " tokens=" << n_tokens << " threads=" << pool.size();
        }
        // Each output is one row's dot with one token (prefill == decode steps).
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(want[t * rows + r], vec_dot_fn_scalar(type)(m.row(r), xq.data() + t * (cols / 32), cols));
      }
    }
  }
}

// At the CPU's own SIMD level, threads still only split rows: the result does
// not depend on the thread count.
TEST(Matmul, ThreadCountDoesNotChangeSimdResult) {
  std::mt19937 rng(6);
  const int64_t rows = 45, cols = 512, n_tokens = 2;
  WeightMatrix m;
  m.type = DType::Q4_1;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = row_bytes(m.type, cols);
  std::vector<uint8_t> data(m.row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) fill_weight_row(m.type, cols, rng, data.data() + r * m.row_bytes);
  m.data = data.data();
  std::vector<float> x(cols * n_tokens);
  for (float& v : x) v = uniform(rng, -1, 1);
  std::vector<BlockQ8> xq(cols / 32 * n_tokens);
  quantize_row_q8(x.data(), xq.data(), cols * n_tokens);
  std::vector<float> one(rows * n_tokens), three(rows * n_tokens), ref(rows * n_tokens);
  ThreadPool p1(1), p3(3);
  matmul(m, xq.data(), n_tokens, one.data(), p1);
  matmul(m, xq.data(), n_tokens, three.data(), p3);
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
  matmul_reference(m, xq.data(), n_tokens, ref.data());
  for (size_t i = 0; i < ref.size(); ++i) {
    const DotReference q = dot_with_quantized(m.type, m.row(i % rows), xq.data() + (i / rows) * (cols / 32), cols);
    EXPECT_LE(std::fabs(one[i] - ref[i]), 2e-5 * q.terms) << "output " << i;
  }
}

}  // namespace
}  // namespace tally
