// Row operations of the forward pass against double-precision math, and the
// geometric properties RoPE must have (rotation, pairing, relative positions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/half.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace tally {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float

std::vector<float> random_vector(int64_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

TEST(RmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 7, 64, 576, 2560}) {
    for (float mag : {1e-3f, 1.0f, 1e3f}) {
      const std::vector<float> x = random_vector(n, rng, -mag, mag), w = random_vector(n, rng, 0.5f, 2.0f);
      const float eps = 1e-5f;
      std::vector<float> out(n);
      rms_norm(x.data(), w.data(), out.data(), n, eps);
      double ss = 0;
      for (float v : x) ss += static_cast<double>(v) * v;
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[i] * inv * w[i];
        // Three float roundings (the scale, two products): a few ulps.
        EXPECT_LE(std::fabs(out[i] - want), 4 * kU * std::fabs(want) + 1e-37)
            << "n=" << n << " mag=" << mag << " [" << i << "]";
      }
    }
  }
}

TEST(RmsNorm, ZeroInputStaysZeroAndInPlaceWorks) {
  std::vector<float> z(16, 0.0f), w(16, 1.0f), out(16, 5.0f);
  rms_norm(z.data(), w.data(), out.data(), 16, 1e-6f);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  std::vector<float> x = {3, 4, 0, 0}, w4 = {1, 1, 1, 2}, copy = x;
  std::vector<float> expect(4);
  rms_norm(copy.data(), w4.data(), expect.data(), 4, 0);
  rms_norm(x.data(), w4.data(), x.data(), 4, 0);  // the forward pass normalizes in place
  EXPECT_EQ(x, expect);
  EXPECT_FLOAT_EQ(x[0], 3 / 2.5f);  // rms of (3, 4, 0, 0) = sqrt(25 / 4) = 2.5
  EXPECT_FLOAT_EQ(x[1], 4 / 2.5f);
}

TEST(SiluMulAndAdd, MatchDouble) {
  std::mt19937 rng(3);
  std::vector<float> g = random_vector(301, rng, -20, 20), up = random_vector(301, rng, -3, 3);
  for (float edge : {0.0f, -0.0f, 88.0f, -88.0f, 100.0f, -100.0f, 1e-30f, -1e30f}) g.push_back(edge), up.push_back(1.5f);
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> out(n);
  for (auto fn : {silu_mul_scalar, silu_mul}) {  // the reference, then the kernel of the CPU's level
    fn(g.data(), up.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = g[i] / (1 + std::exp(-static_cast<double>(g[i]))) * up[i];
      EXPECT_LE(std::fabs(out[i] - want), 8 * kU * std::fabs(want) + 1e-30) << "g=" << g[i];
    }
  }
  g.resize(300);
  up.resize(300);
  std::vector<float> a = g;
  add_inplace(a.data(), up.data(), 300);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(a[i], g[i] + up[i]);
}

// GELU's tanh form (Gemma), against 0.5 x (1 + tanh(...)) in double: the
// scalar twin and the kernel of the CPU's level.
TEST(GeluTanhMul, MatchesTheTanhFormInDouble) {
  std::mt19937 rng(5);
  std::vector<float> g = random_vector(301, rng, -12, 12), up = random_vector(301, rng, -3, 3);
  for (float edge : {0.0f, -0.0f, 5.0f, -5.0f, 30.0f, -30.0f, 1e-30f, -1e30f, 1e30f}) g.push_back(edge), up.push_back(1.5f);
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> out(n);
  for (auto fn : {gelu_tanh_mul_scalar, gelu_tanh_mul}) {
    fn(g.data(), up.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[i];
      const double want = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
      // Relative to the input's size: near gelu's zero at large negative x the
      // float cube and exp lose what double keeps, a few ulp of x.
      EXPECT_LE(std::fabs(out[i] - want), 16 * kU * (std::fabs(want) + 1e-3 * std::fabs(x * up[i])) + 1e-30)
          << "g=" << g[i];
    }
  }
}

// The SIMD exp (exp_simd.h) at every level against e^x in double: within
// 0.55 ulp where the result is normal (glibc's expf, the scalar twin: 0.502),
// so rounded as a correctly rounded float would be but for about 0.8% of
// inputs (glibc: 0.05%), and then to the neighbouring float, never further.
// The SIMD levels give the same bits as each other, subnormal results
// included. -inf gives exactly 0, the ends of float's range overflow and
// underflow as expf does.
TEST(ExpEach, WithinOneUlpAtEveryLevel) {
  std::mt19937 rng(6);
  std::vector<float> x = random_vector(1 << 20, rng, -104, 89);
  for (float v : random_vector(1 << 16, rng, -1e-3f, 1e-3f)) x.push_back(v);
  for (float v : random_vector(1 << 12, rng, -104, -87)) x.push_back(v);  // subnormal results
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.73f, 100.0f, -87.3f, -103.9f, -104.0f, -150.0f, -1e30f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  const int64_t n = static_cast<int64_t>(x.size()) - 3;  // not a multiple of 8 or 16: the tails run too
  std::vector<float> first_simd;
  for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni}) {
    if (!simd_supported(level)) continue;
    std::vector<float> out(n);
    kernels_at(level).exp_each(x.data(), out.data(), n);
    int64_t misrounded = 0;
    double max_ulp = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double exact = std::exp(static_cast<double>(x[i]));
      const float want = static_cast<float>(exact);
      if (std::isnormal(want))
        max_ulp = std::max(max_ulp, std::fabs(out[i] - exact) / std::ldexp(1.0, std::ilogb(want) - 23));
      if (out[i] == want) continue;
      ++misrounded;
      ASSERT_TRUE(std::isfinite(want)) << simd_level_name(level) << " x=" << x[i];
      ASSERT_EQ(std::nextafter(want, out[i]), out[i]) << simd_level_name(level) << " x=" << x[i];
    }
    EXPECT_LE(max_ulp, level == SimdLevel::Scalar ? 0.502 : 0.55) << simd_level_name(level);
    EXPECT_LE(misrounded, level == SimdLevel::Scalar ? n / 1000 : n / 100) << simd_level_name(level);
    if (level != SimdLevel::Scalar) {
      if (first_simd.empty()) first_simd = out;
      EXPECT_EQ(out, first_simd) << simd_level_name(level);
    }
    const float specials[] = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 0.0f};
    float got[3];
    kernels_at(level).exp_each(specials, got, 3);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_EQ(got[1], std::numeric_limits<float>::infinity());
    EXPECT_EQ(got[2], 1.0f);
  }
}

// The AVX-512 element-wise kernels are the AVX2 ones lane by lane: the same
// bits, on lengths whose tails each level treats its own way (8 or 16 lanes).
TEST(ElementWise, Avx512EqualsAvx2) {
  if (!simd_supported(SimdLevel::Avx512Vnni)) GTEST_SKIP() << "CPU has no AVX-512";
  std::mt19937 rng(7);
  const std::vector<float> g = random_vector(1536, rng, -20, 20), up = random_vector(1536, rng, -3, 3);
  const KernelTable& a = kernels_at(SimdLevel::Avx2);
  const KernelTable& b = kernels_at(SimdLevel::Avx512Vnni);
  for (int64_t n : {1536, 1000}) {  // 1000: the AVX2 tail is empty, the AVX-512 one masked
    std::vector<float> oa(n), ob(n);
    a.silu_mul(g.data(), up.data(), oa.data(), n);
    b.silu_mul(g.data(), up.data(), ob.data(), n);
    EXPECT_EQ(oa, ob) << "silu n=" << n;
    a.gelu_tanh_mul(g.data(), up.data(), oa.data(), n);
    b.gelu_tanh_mul(g.data(), up.data(), ob.data(), n);
    EXPECT_EQ(oa, ob) << "gelu n=" << n;
    a.exp_each(g.data(), oa.data(), n);
    b.exp_each(g.data(), ob.data(), n);
    EXPECT_EQ(oa, ob) << "exp n=" << n;
  }
}

TEST(ToF16, SimdRoundsAsTheScalarReference) {
  std::mt19937 rng(4);
  std::vector<float> x = random_vector(1000, rng, -70000, 70000);
  for (float v : random_vector(1000, rng, -1e-4f, 1e-4f)) x.push_back(v);  // f16 subnormals
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, -1e9f, 5.96e-8f, 2.98e-8f, std::numeric_limits<float>::infinity()})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> want(n), got(n);
  to_f16_scalar(x.data(), want.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(want[i], f32_to_f16(x[i]));
  to_f16(x.data(), got.data(), n);  // at the CPU's own level
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "x=" << x[i];
}

// --- RoPE ---------------------------------------------------------------------

TEST(Rope, AnglesFollowTheFormula) {
  for (float base : {10000.0f, 1000000.0f}) {
    for (int64_t rot : {8, 64, 128}) {
      for (int64_t pos : {0, 1, 7, 1000, 32767}) {
        std::vector<float> c(rot / 2), s(rot / 2);
        rope_angles(pos, rot, base, c.data(), s.data());
        for (int64_t i = 0; i < rot / 2; ++i) {
          // angle_i = pos * base^(-2i/d), written as an exponential of a log.
          const double log_base = std::log(static_cast<double>(base));
          const double theta = static_cast<double>(pos) * std::exp(-2.0 * i / rot * log_base);
          EXPECT_NEAR(c[i], std::cos(theta), 2e-7) << "base " << base << " rot " << rot << " pos " << pos << " i " << i;
          EXPECT_NEAR(s[i], std::sin(theta), 2e-7) << "base " << base << " rot " << rot << " pos " << pos << " i " << i;
        }
      }
    }
  }
  float c[2], s[2];
  rope_angles(1, 4, 10000, c, s);  // i = 0: angle 1 rad; i = 1: 1 / 100 rad
  EXPECT_FLOAT_EQ(c[0], static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(s[1], static_cast<float>(std::sin(0.01)));
}

constexpr RopePairing kPairings[] = {RopePairing::Adjacent, RopePairing::HalfSplit};

TEST(Rope, PositionZeroIsIdentity) {
  std::mt19937 rng(4);
  const int64_t hd = 64;
  std::vector<float> c(hd / 2), s(hd / 2);
  rope_angles(0, hd, 10000, c.data(), s.data());
  for (RopePairing pairing : kPairings) {
    const std::vector<float> x = random_vector(3 * hd, rng);
    std::vector<float> y = x;
    rope_apply(y.data(), 3, hd, hd, c.data(), s.data(), pairing);
    EXPECT_EQ(y, x);
  }
}

// Index pairs (a, b) that RoPE rotates together.
std::pair<int64_t, int64_t> pair_of(RopePairing p, int64_t i, int64_t rot) {
  return p == RopePairing::Adjacent ? std::make_pair(2 * i, 2 * i + 1) : std::make_pair(i, i + rot / 2);
}

TEST(Rope, RotatesEachPairByItsAngleAndLeavesTheRestAlone) {
  std::mt19937 rng(5);
  const int64_t n_heads = 3, hd = 64, rot = 32;  // partial rotary: dims [rot, hd) untouched
  std::vector<float> c(rot / 2), s(rot / 2);
  rope_angles(123, rot, 10000, c.data(), s.data());
  for (RopePairing pairing : kPairings) {
    const std::vector<float> x = random_vector(n_heads * hd, rng);
    std::vector<float> y = x;
    rope_apply(y.data(), n_heads, hd, rot, c.data(), s.data(), pairing);
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* xh = x.data() + h * hd;
      const float* yh = y.data() + h * hd;
      for (int64_t i = 0; i < rot / 2; ++i) {
        const auto [a, b] = pair_of(pairing, i, rot);
        const double n0 = std::hypot(xh[a], xh[b]), n1 = std::hypot(yh[a], yh[b]);
        EXPECT_NEAR(n1, n0, 4 * kU * n0 + 1e-7) << "head " << h << " pair " << i;
        // Counter-clockwise by angle_i: (x0 cos - x1 sin, x0 sin + x1 cos).
        EXPECT_NEAR(yh[a], xh[a] * c[i] - xh[b] * s[i], 1e-6);
        EXPECT_NEAR(yh[b], xh[a] * s[i] + xh[b] * c[i], 1e-6);
      }
      for (int64_t i = rot; i < hd; ++i) EXPECT_EQ(yh[i], xh[i]) << "head " << h << " dim " << i;
    }
  }
  // (1, 0) in pair i lands on (cos_i, sin_i).
  std::vector<float> e(rot, 0.0f);
  e[2] = 1;  // Adjacent pair 1
  rope_apply(e.data(), 1, rot, rot, c.data(), s.data(), RopePairing::Adjacent);
  EXPECT_EQ(e[2], c[1]);
  EXPECT_EQ(e[3], s[1]);
}

// HalfSplit pairs (i, i + d/2); Adjacent pairs (2i, 2i+1). Permuting a
// HalfSplit vector into adjacent order (y[2i] = x[i], y[2i+1] = x[i + d/2]),
// rotating with Adjacent and permuting back gives the HalfSplit rotation.
TEST(Rope, HalfSplitEqualsAdjacentUnderThePermutation) {
  std::mt19937 rng(6);
  const int64_t n_heads = 2, hd = 128;
  for (int64_t rot : {128, 64}) {
    std::vector<float> c(rot / 2), s(rot / 2);
    rope_angles(777, rot, 1000000, c.data(), s.data());
    const std::vector<float> x = random_vector(n_heads * hd, rng);
    std::vector<float> half = x, adj = x;
    rope_apply(half.data(), n_heads, hd, rot, c.data(), s.data(), RopePairing::HalfSplit);
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < rot / 2; ++i) {
        adj[h * hd + 2 * i] = x[h * hd + i];
        adj[h * hd + 2 * i + 1] = x[h * hd + i + rot / 2];
      }
    rope_apply(adj.data(), n_heads, hd, rot, c.data(), s.data(), RopePairing::Adjacent);
    std::vector<float> back = adj;
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < rot / 2; ++i) {
        back[h * hd + i] = adj[h * hd + 2 * i];
        back[h * hd + i + rot / 2] = adj[h * hd + 2 * i + 1];
      }
    EXPECT_EQ(back, half) << "rot " << rot;
  }
}

// The point of RoPE: q(m) . k(n) depends only on m - n.
TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  std::mt19937 rng(7);
  const int64_t hd = 64;
  const std::vector<float> q = random_vector(hd, rng), k = random_vector(hd, rng);
  for (RopePairing pairing : kPairings) {
    auto rotated_dot = [&](int64_t m, int64_t n) {
      std::vector<float> a = q, b = k, c(hd / 2), s(hd / 2);
      rope_angles(m, hd, 10000, c.data(), s.data());
      rope_apply(a.data(), 1, hd, hd, c.data(), s.data(), pairing);
      rope_angles(n, hd, 10000, c.data(), s.data());
      rope_apply(b.data(), 1, hd, hd, c.data(), s.data(), pairing);
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(a[i]) * b[i];
      return d;
    };
    EXPECT_NEAR(rotated_dot(5, 3), rotated_dot(105, 103), 1e-4);
    EXPECT_NEAR(rotated_dot(3, 3), rotated_dot(0, 0), 1e-4);
    EXPECT_GT(std::fabs(rotated_dot(5, 3) - rotated_dot(5, 4)), 1e-3);  // and it does depend on m - n
  }
}

}  // namespace
}  // namespace tally
