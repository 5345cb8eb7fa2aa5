// Attention over a paged KV cache: the SIMD paths (AVX2, AVX-512) against the
// scalar reference, and that against the same attention computed in double
// from the stored (f16-rounded or dequantized) keys and values, for F16, F32,
// Q8_0 and Q4_0 caches (the quantized ones score an int8 copy of the query), head
// sizes that do and do not fill 8- and 16-float vectors, GQA groups of 1 to 8
// heads, and key counts that cross block and chunk (kAttentionChunk) boundaries.
#include <gtest/gtest.h>

#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "kv/kv_cache.h"

namespace tally {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float
constexpr int64_t kBlock = 16;
constexpr int64_t kPositions = 2 * kAttentionChunk + 88;
constexpr int64_t kHeads = 2;

// The value at index i of a stored (head_dim) vector.

struct Reference {
  std::vector<double> out;  // (head_dim)
  double tol_rel;           // tolerance for out[i], relative to max_j |v_j[i]| (see below)
  std::vector<double> vmax;  // (head_dim): max_j |v_j[i]|
};

// Attention in double. Tolerance for a float computation: each score s_j is a
// dot of head_dim products (recursive or 8-lane summation, then * scale), off
// by at most delta = (head_dim + 1) u S with S = max_j scale * sum_i |q_i k_ji|;
// softmax turns that into a relative error of about 2 delta + 5u on each weight
// p_j, and the n_keys-term sum of p_j v_j adds n_keys u of max|v|.
Reference reference(const float* q, const KvLayerView& kv, int64_t h, int64_t n_keys, float scale, int64_t first = 0) {
  const int64_t hd = kv.head_dim;
  const uint64_t row = kv.bytes_of(hd);
  auto key = [&](int64_t p) { return kv.k_head(p / kv.block_size, h) + (p % kv.block_size) * row; };
  auto val = [&](int64_t p) { return kv.v_head(p / kv.block_size, h) + (p % kv.block_size) * row; };
  // A quantized cache scores q rounded to int8 per 32-value block: each q_i is
  // off by at most half its block's step d_b = max|q_block| / 127 (plus float
  // rounding of d_b), so a score moves by at most scale * sum_b d_b / 2 * sum_{i in b} |k_i|.
  const bool quantized = kv.type == DType::Q8_0 || kv.type == DType::Q4_0;
  std::vector<double> half_step(hd / 32 + 1, 0.0);
  if (quantized)
    for (int64_t b = 0; b < hd / 32; ++b) {
      double amax = 0;
      for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{q[b * 32 + i]}));
      half_step[b] = amax / 127 * (0.5 + 2 * kU);
    }
  std::vector<double> s(n_keys, -INFINITY);
  double mx = -INFINITY, big_s = 0, q_err = 0;
  for (int64_t p = first; p < n_keys; ++p) {
    double dot = 0, abs = 0, err = 0;
    for (int64_t i = 0; i < hd; ++i) {
      const double k = test::stored_value(key(p), i, kv.type);
      dot += q[i] * k;
      abs += std::fabs(q[i] * k);
      if (quantized) err += half_step[i / 32] * std::fabs(k);
    }
    s[p] = dot * scale;
    big_s = std::max(big_s, abs * scale);
    q_err = std::max(q_err, err * scale);
    mx = std::max(mx, s[p]);
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  Reference r{std::vector<double>(hd, 0.0), 0, std::vector<double>(hd, 0.0)};
  for (int64_t p = first; p < n_keys; ++p)
    for (int64_t i = 0; i < hd; ++i) {
      const double v = test::stored_value(val(p), i, kv.type);
      r.out[i] += s[p] / sum * v;
      r.vmax[i] = std::max(r.vmax[i], std::fabs(v));
    }
  // Every score off by at most delta moves each softmax weight by a factor in
  // [e^-2delta, e^2delta].
  const double delta = static_cast<double>(hd + 1) * kU * big_s + q_err;
  r.tol_rel = std::expm1(2 * delta) + (static_cast<double>(n_keys) + 10) * kU;
  return r;
}

// A one-layer cache holding kPositions random positions.
struct Filled {
  KvCache cache;
  KvCache::SeqId seq;

  Filled(int64_t head_dim, DType type, std::mt19937& rng)
      : cache(KvShape{1, kHeads, head_dim}, KvCacheOptions{kPositions, kBlock, type, 64u << 20}) {
    seq = cache.create_sequence();
    cache.begin_write(seq, 0, kPositions);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> k(kHeads * head_dim), v(kHeads * head_dim);
    for (int64_t p = 0; p < kPositions; ++p) {
      for (auto& e : k) e = u(rng);
      for (auto& e : v) e = u(rng);
      cache.store(0, seq, p, k.data(), v.data());
    }
  }
};

void check_attention(DType type, int64_t head_dim, bool simd) {
  std::mt19937 rng(static_cast<unsigned>(head_dim) * 7 + static_cast<unsigned>(type));
  Filled f(head_dim, type, rng);
  const KvLayerView kv = f.cache.view(0, f.seq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::uniform_real_distribution<float> u(-2, 2);
  for (int64_t n_keys : {int64_t{1}, int64_t{2}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33}, int64_t{64},
                         int64_t{99}, kAttentionChunk, kAttentionChunk + 1, 2 * kAttentionChunk + 5, kPositions}) {
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<float> qbuf(head_dim + 1);
      float* q = qbuf.data() + 1;  // not 32-byte aligned
      for (int64_t i = 0; i < head_dim; ++i) q[i] = u(rng);
      std::vector<float> scratch(attention_scratch_floats(1, head_dim, n_keys));
      std::vector<float> out_s(head_dim + 1), out_a(head_dim + 1);
      const AttendArgs a{q, 1, h, scale};
      kernels_at(SimdLevel::Scalar).attention(kv).group(kv, a, KeyRange::causal(n_keys), scratch.data(),
                                                        out_s.data() + 1);
      if (simd)
        kernels_at(SimdLevel::Avx2).attention(kv).group(kv, a, KeyRange::causal(n_keys), scratch.data(),
                                                        out_a.data() + 1);
      const Reference r = reference(q, kv, h, n_keys, scale);
      for (int64_t i = 0; i < head_dim; ++i) {
        const double tol = r.tol_rel * r.vmax[i] + 1e-30;
        ASSERT_LE(std::fabs(out_s[i + 1] - r.out[i]), tol)
            << dtype_name(type) << " head_dim=" << head_dim << " n_keys=" << n_keys << " head " << h << " [" << i
            << "]: scalar " << out_s[i + 1] << " double " << r.out[i];
        if (simd) {
          ASSERT_LE(std::fabs(out_a[i + 1] - out_s[i + 1]), 2 * tol)
              << dtype_name(type) << " head_dim=" << head_dim << " n_keys=" << n_keys << " head " << h << " [" << i
              << "]: avx2 " << out_a[i + 1] << " scalar " << out_s[i + 1];
        }
      }
    }
  }
}

// The n_q heads of a group at `level` against the scalar reference, head by
// head; and at every level a query's result does not depend on how many
// further (masked) keys were scored: the dense form equals the causal one bit for bit.
void check_group(DType type, int64_t head_dim, SimdLevel level) {
  std::mt19937 rng(static_cast<unsigned>(head_dim) * 11 + static_cast<unsigned>(type));
  Filled f(head_dim, type, rng);
  const KvLayerView kv = f.cache.view(0, f.seq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> scratch(attention_scratch_floats(16, head_dim, kPositions));
  // 1-8 are one kernel instance each; 11 and 16 split into groups of 8 and the rest.
  for (int64_t n_q : {1, 2, 3, 4, 5, 6, 7, 8, 11, 16}) {
    for (int64_t n_keys : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{31}, int64_t{33}, kAttentionChunk - 1,
                           kAttentionChunk + 17, 2 * kAttentionChunk, kPositions - 3}) {
      const int64_t h = n_keys % kHeads;
      std::vector<float> qbuf(n_q * head_dim + 1);
      float* q = qbuf.data() + 1;  // not 32-byte aligned
      for (int64_t i = 0; i < n_q * head_dim; ++i) q[i] = u(rng);
      std::vector<float> out_s(n_q * head_dim), out_l(n_q * head_dim), out_d(n_q * head_dim);
      const int64_t more = std::min(kPositions, n_keys + 37);
      {
        test::SimdLevelScope scalar(SimdLevel::Scalar);
        attend_group(kv, AttendArgs{q, n_q, h, scale}, KeyRange::causal(n_keys), scratch.data(), out_s.data());
      }
      {
        test::SimdLevelScope at(level);
        attend_group(kv, AttendArgs{q, n_q, h, scale}, KeyRange::causal(n_keys), scratch.data(), out_l.data());
        attend_group(kv, AttendArgs{q, n_q, h, scale}, KeyRange{more, n_keys, 0}, scratch.data(), out_d.data());
      }
      const std::string where = std::string(dtype_name(type)) + " head_dim=" + std::to_string(head_dim) +
                                " n_q=" + std::to_string(n_q) + " n_keys=" + std::to_string(n_keys);
      ASSERT_EQ(0, std::memcmp(out_l.data(), out_d.data(), out_l.size() * sizeof(float)))
          << where << ": scoring " << more << " keys and masking changed the result";
      for (int64_t hq = 0; hq < n_q; ++hq) {
        const Reference r = reference(q + hq * head_dim, kv, h, n_keys, scale);
        for (int64_t i = 0; i < head_dim; ++i) {
          const double tol = 2 * r.tol_rel * r.vmax[i] + 1e-30;
          const float s_v = out_s[hq * head_dim + i], l_v = out_l[hq * head_dim + i];
          ASSERT_LE(std::fabs(l_v - s_v), tol)
              << where << " head " << hq << " [" << i << "]: " << simd_level_name(level) << " " << l_v << " scalar "
              << s_v;
        }
      }
    }
  }
}

// A sliding window: keys below first_visible weigh nothing, at every level the
// result is the attention over [first, n_keys) alone (against double), and the
// levels agree with the scalar twin; windows start inside a block, on a block
// and on a chunk boundary, and the group of 3 heads is SmolLM2's.
void check_window(DType type, int64_t head_dim, SimdLevel level) {
  std::mt19937 rng(static_cast<unsigned>(head_dim) * 13 + static_cast<unsigned>(type));
  Filled f(head_dim, type, rng);
  const KvLayerView kv = f.cache.view(0, f.seq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::uniform_real_distribution<float> u(-2, 2);
  const int64_t n_q = 3;
  std::vector<float> scratch(attention_scratch_floats(n_q, head_dim, kPositions));
  std::vector<float> q(n_q * head_dim);
  for (auto& e : q) e = u(rng);
  const int64_t cases[][2] = {{1, 2},   {5, 40}, {16, 17}, {kAttentionChunk - 3, kAttentionChunk + 9},
                              {kAttentionChunk, kPositions}, {kAttentionChunk + 1, 2 * kAttentionChunk},
                              {37, kPositions}, {kPositions - 1, kPositions}};
  for (const auto& [first, n_keys] : cases) {
    std::vector<float> out_s(n_q * head_dim), out_l(n_q * head_dim);
    {
      test::SimdLevelScope scalar(SimdLevel::Scalar);
      attend_group(kv, AttendArgs{q.data(), n_q, 1, scale}, KeyRange{n_keys, -1, first}, scratch.data(), out_s.data());
    }
    {
      test::SimdLevelScope at(level);
      attend_group(kv, AttendArgs{q.data(), n_q, 1, scale}, KeyRange{n_keys, -1, first}, scratch.data(), out_l.data());
    }
    for (int64_t hq = 0; hq < n_q; ++hq) {
      const Reference r = reference(q.data() + hq * head_dim, kv, 1, n_keys, scale, first);
      for (int64_t i = 0; i < head_dim; ++i) {
        const double tol = r.tol_rel * r.vmax[i] + 1e-30;
        ASSERT_LE(std::fabs(out_s[hq * head_dim + i] - r.out[i]), tol)
            << dtype_name(type) << " window [" << first << ", " << n_keys << ") head " << hq << " [" << i << "]";
        ASSERT_LE(std::fabs(out_l[hq * head_dim + i] - out_s[hq * head_dim + i]), 2 * tol)
            << dtype_name(type) << " window [" << first << ", " << n_keys << ") " << simd_level_name(level);
      }
    }
  }
}

// A cache of the tests' shape at `level`, its view and the head's scale.
struct TokensSetup {
  std::mt19937 rng;
  Filled f;
  KvLayerView kv;
  float scale;
  test::SimdLevelScope at;
  TokensSetup(DType type, int64_t head_dim, SimdLevel level, unsigned salt)
      : rng(static_cast<unsigned>(head_dim) * salt + static_cast<unsigned>(type)),
        f(head_dim, type, rng),
        kv(f.cache.view(0, f.seq)),
        scale(1.0f / std::sqrt(static_cast<float>(head_dim))),
        at(level) {}
};

// attend_tokens' result for each of n_tokens queries (query i sees n_keys + i
// keys) is its own attend_group's: the same bits, or NaN in both.
void expect_each_alone(const TokensSetup& s, const std::vector<float>& q, int64_t q_stride, int64_t n_tokens,
                       int64_t n_q, int64_t h, int64_t n_keys, const std::vector<float>& out, int64_t out_stride,
                       const std::string& what) {
  const int64_t head_dim = s.kv.head_dim;
  std::vector<float> want(n_q * head_dim);
  for (int64_t i = 0; i < n_tokens; ++i) {
    std::vector<float> group_scratch(attention_scratch_floats(n_q, head_dim, n_keys + i));
    attend_group(s.kv, AttendArgs{q.data() + i * q_stride, n_q, h, s.scale}, KeyRange::causal(n_keys + i),
                 group_scratch.data(), want.data());
    for (int64_t j = 0; j < n_q * head_dim; ++j) {
      const float got = out[i * out_stride + j];
      if (std::isnan(want[j]) && std::isnan(got)) continue;
      ASSERT_EQ(0, std::memcmp(&want[j], &got, sizeof(float)))
          << what << " n_q=" << n_q << " n_tokens=" << n_tokens << " n_keys=" << n_keys << ": query " << i
          << " value " << j << " is " << got << ", attend_group's " << want[j];
    }
  }
}

// Queries at consecutive positions taken together (attend_tokens) give each
// query's attend_group result bit for bit, at `level`: 1 to kAttentionTokens
// queries, whose keys end inside a chunk, on its boundary and across it, heads
// whose rows make one kernel group or several, strided queries and outputs.
void check_tokens(DType type, int64_t head_dim, SimdLevel level) {
  TokensSetup s(type, head_dim, level, 17);
  const std::string what = std::string(dtype_name(type)) + " head_dim=" + std::to_string(head_dim) + " " +
                           simd_level_name(level);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> scratch(attention_tokens_scratch_floats(5, head_dim, kPositions));
  for (int64_t n_q : {1, 3, 5})
    for (int64_t n_tokens = 1; n_tokens <= kAttentionTokens; ++n_tokens)
      for (int64_t n_keys : {int64_t{1}, int64_t{14}, kAttentionChunk - 2, kAttentionChunk, 2 * kAttentionChunk - 1,
                             kPositions - kAttentionTokens}) {
        const int64_t q_stride = n_q * head_dim + 5, out_stride = n_q * head_dim + 3, h = n_keys % kHeads;
        std::vector<float> q(n_tokens * q_stride), out(n_tokens * out_stride);
        for (auto& e : q) e = u(s.rng);
        attend_tokens(s.kv, AttendArgs{q.data(), n_q, h, s.scale}, QueryRun{n_tokens, q_stride, out_stride}, n_keys,
                      scratch.data(), out.data());
        expect_each_alone(s, q, q_stride, n_tokens, n_q, h, n_keys, out, out_stride, what);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// A query whose scores overflow to infinity or are NaN takes exp_sum's own
// path in every kernel: taken together with finite queries, each query still
// gets its attend_group result, and the finite ones stay finite. A NaN query
// scores NaN with every cache type (the block caches' int8 query keeps the
// NaN as its scale), and scores that are all NaN weigh nothing: the head's
// output is zeros, as with no key to see.
void check_tokens_not_finite(DType type, int64_t head_dim, SimdLevel level) {
  TokensSetup s(type, head_dim, level, 29);
  std::uniform_real_distribution<float> u(-2, 2);
  const int64_t n_q = 3, n_tokens = kAttentionTokens, n_keys = kAttentionChunk + 7, q_stride = n_q * head_dim;
  std::vector<float> q(n_tokens * q_stride), out(q.size());
  for (auto& e : q) e = u(s.rng);
  q[2 * q_stride + head_dim] = std::numeric_limits<float>::infinity();  // token 2, head 1: scores of +-inf
  q[5 * q_stride] = std::numeric_limits<float>::quiet_NaN();  // token 5, head 0: NaN scores
  std::vector<float> scratch(attention_tokens_scratch_floats(n_q, head_dim, n_keys + n_tokens - 1));
  attend_tokens(s.kv, AttendArgs{q.data(), n_q, 0, s.scale}, QueryRun{n_tokens, q_stride, q_stride}, n_keys,
                scratch.data(), out.data());
  expect_each_alone(s, q, q_stride, n_tokens, n_q, 0, n_keys, out, q_stride,
                    std::string(dtype_name(type)) + " " + simd_level_name(level) + " not finite");
  for (int64_t j = 0; j < head_dim; ++j) ASSERT_EQ(out[5 * q_stride + j], 0.0f) << "NaN query, value " << j;
  for (int64_t i = 0; i < n_tokens; ++i) {
    if (i == 2 || i == 5) continue;
    for (int64_t j = 0; j < q_stride; ++j) ASSERT_TRUE(std::isfinite(out[i * q_stride + j])) << "query " << i;
  }
}

struct AttentionCase {
  DType type;
  int64_t head_dim;
};

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, ScalarMatchesDouble) { check_attention(GetParam().type, GetParam().head_dim, false); }

TEST_P(AttentionTest, Avx2MatchesScalar) {
  if (!simd_supported(SimdLevel::Avx2)) GTEST_SKIP() << "CPU has no AVX2";
  check_attention(GetParam().type, GetParam().head_dim, true);
}

TEST_P(AttentionTest, ScalarGroupsIgnoreMaskedKeys) {
  check_group(GetParam().type, GetParam().head_dim, SimdLevel::Scalar);
}

TEST_P(AttentionTest, Avx2GroupsMatchScalar) {
  if (!simd_supported(SimdLevel::Avx2)) GTEST_SKIP() << "CPU has no AVX2";
  check_group(GetParam().type, GetParam().head_dim, SimdLevel::Avx2);
}

TEST_P(AttentionTest, ScalarWindowSeesOnlyItsKeys) {
  check_window(GetParam().type, GetParam().head_dim, SimdLevel::Scalar);
}

TEST_P(AttentionTest, Avx2WindowMatchesScalar) {
  if (!simd_supported(SimdLevel::Avx2)) GTEST_SKIP() << "CPU has no AVX2";
  check_window(GetParam().type, GetParam().head_dim, SimdLevel::Avx2);
}

TEST_P(AttentionTest, Avx512WindowMatchesScalar) {
  if (!simd_supported(SimdLevel::Avx512Vnni)) GTEST_SKIP() << "CPU has no AVX-512";
  check_window(GetParam().type, GetParam().head_dim, SimdLevel::Avx512Vnni);
}

TEST_P(AttentionTest, Avx512GroupsMatchScalar) {
  if (!simd_supported(SimdLevel::Avx512Vnni)) GTEST_SKIP() << "CPU has no AVX-512";
  check_group(GetParam().type, GetParam().head_dim, SimdLevel::Avx512Vnni);
}

TEST_P(AttentionTest, TokensTogetherEqualEachAloneAtEveryLevel) {
  for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni})
    if (simd_supported(level)) check_tokens(GetParam().type, GetParam().head_dim, level);
}

TEST_P(AttentionTest, TokensWithScoresNotFiniteEqualEachAlone) {
  for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni})
    if (simd_supported(level)) check_tokens_not_finite(GetParam().type, GetParam().head_dim, level);
}

// 64 and 128 are the model head sizes; 48 fills 16-float vectors with an odd
// count of them; 40 fills 8-float vectors only (AVX-512 takes the AVX2 path);
// 36 is not a multiple of 8 (the SIMD code takes the scalar path). The block
// formats take multiples of 32: 32 and 96 are one and an odd count of blocks.
INSTANTIATE_TEST_SUITE_P(Heads, AttentionTest,
                         ::testing::Values(AttentionCase{DType::F16, 64}, AttentionCase{DType::F16, 128},
                                           AttentionCase{DType::F16, 48}, AttentionCase{DType::F16, 40},
                                           AttentionCase{DType::F16, 36}, AttentionCase{DType::F32, 64},
                                           AttentionCase{DType::F32, 128}, AttentionCase{DType::F32, 48},
                                           AttentionCase{DType::F32, 40}, AttentionCase{DType::F32, 36},
                                           AttentionCase{DType::Q8_0, 64}, AttentionCase{DType::Q8_0, 128},
                                           AttentionCase{DType::Q8_0, 32}, AttentionCase{DType::Q8_0, 96},
                                           AttentionCase{DType::Q4_0, 64}, AttentionCase{DType::Q4_0, 128},
                                           AttentionCase{DType::Q4_0, 32}, AttentionCase{DType::Q4_0, 96}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.type)) + "_" + std::to_string(info.param.head_dim);
                         });

// One key: the output is exactly that key's value (softmax of one score is 1).
TEST(Attention, SingleKeyReturnsItsValue) {
  KvCache cache(KvShape{1, 1, 8}, KvCacheOptions{4, 4, DType::F32, 1u << 20});
  const auto s = cache.create_sequence();
  cache.begin_write(s, 0, 1);
  const float k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v[8] = {-1, 0.5f, 2, 3, -4, 5, 6, 7};
  cache.store(0, s, 0, k, v);
  const float q[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  std::vector<float> scratch(attention_scratch_floats(1, 8, 1));
  float out[8];
  attend_group(cache.view(0, s), AttendArgs{q, 1, 0, 0.125f}, KeyRange::causal(1), scratch.data(), out);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], v[i]) << i;
}

// The table's attention entries: one for every cache format and head-size
// class at every level, a level's own kernels only for the head sizes they
// take (the classes below keep the level beneath's, so an AVX-512 table
// hands a 40-wide head to the AVX2 kernels and a 36-wide one to the scalar
// ones), and a type no cache holds is refused by name.
TEST(Attention, TheTableHasAKernelPerFormatAndHeadSizeAtEveryLevel) {
  const DType formats[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
  const SimdLevel levels[] = {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni};
  for (SimdLevel level : levels) {
    if (!simd_supported(level)) continue;
    const KernelTable& t = kernels_at(level);
    for (DType type : formats)
      for (int64_t head_dim : {36, 40, 64}) {
        KvLayerView kv;
        kv.type = type;
        kv.head_dim = head_dim;
        const AttentionKernels& k = t.attention(kv);
        EXPECT_TRUE(k.chunk && k.group && k.tokens) << simd_level_name(level) << " " << dtype_name(type) << " " << head_dim;
      }
  }
  KvLayerView kv;
  kv.head_dim = 40;
  kv.type = DType::F16;
  if (simd_supported(SimdLevel::Avx512Vnni)) {
    EXPECT_EQ(kernels_at(SimdLevel::Avx512Vnni).attention(kv).group, kernels_at(SimdLevel::Avx2).attention(kv).group);
    kv.head_dim = 36;
    EXPECT_EQ(kernels_at(SimdLevel::Avx512Vnni).attention(kv).group, kernels_at(SimdLevel::Scalar).attention(kv).group);
    kv.head_dim = 64;
    EXPECT_NE(kernels_at(SimdLevel::Avx512Vnni).attention(kv).group, kernels_at(SimdLevel::Avx2).attention(kv).group);
  }
  kv.type = DType::Q4_K;
  try {
    (void)kernels_at(SimdLevel::Scalar).attention(kv);
    FAIL() << "a Q4_K cache was given a kernel";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tally
