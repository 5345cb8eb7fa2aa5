#pragma once
// The AVX2 primitives of one attention chunk (attention_ops_scalar.h is their
// reference). For the translation units compiled with -mavx2 -mfma -mf16c:
// attention_avx2.cpp, and attention_avx512.cpp, whose kernels fall back to
// these for head sizes that do not fill 16-float vectors.
#include "kernels/x86_intrinsics.h"  // first: see there

#include <algorithm>

#include "kernels/attention_ops_scalar.h"
#include "kernels/exp_simd.h"

#ifdef __AVX2__
namespace tally {
namespace {

// Installed for head sizes of whole 8-float vectors (HeadFit::Vec8 and up).
struct Avx2Ops {
  static constexpr bool kRowLanes = false;
  // The key is converted once per 8 dimensions and used by every head.
  template <int NQ, bool kF32>
  static void dots_block_t(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
                           float* scores, int64_t stride) {
    for (int64_t j = 0; j < m; ++j, k += step) {
      __m256 acc[NQ];
      for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t i = 0; i < n; i += 8) {
        const __m256 kv = load8<kF32>(k, i);
        for (int h = 0; h < NQ; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * n + i), kv, acc[h]);
      }
      for (int h = 0; h < NQ; ++h) scores[h * stride + j] = hsum(acc[h]) * scale;
    }
  }
  template <class Fmt>
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                         float scale, float* scores, int64_t stride) {
    for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
      dots_block_t<NQ, Fmt::kF32>(q + h0 * n, k, m, step, n, scale, scores + h0 * stride, stride);
    });
  }
  static float exp_sum(float* x, int64_t n, float* max_out) {
    if (n < 8) return ScalarOps::exp_sum(x, n, max_out);
    __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mx = hmax(vmax);
    for (; i < n; ++i) mx = std::fmax(mx, x[i]);
    if (!std::isfinite(mx)) return ScalarOps::exp_sum(x, n, max_out);
    *max_out = mx;
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
      _mm256_storeu_ps(x + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    double sum = hsum(vsum);
    for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    return static_cast<float>(sum);
  }
  // Dimension slices outer, keys inner: the group's partial outputs stay in
  // registers (the chunk's values stay in L1 across the slices, fetched ahead
  // of the first one).
  template <int NQ, bool kF32>
  static void weighted_sum_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g, int64_t b,
                             int64_t e) {
    const int64_t hd = kv.head_dim;
    for (int64_t i = 0; i < hd; i += 8) {
      __m256 acc[NQ];
      for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
      for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();) {
        if (i == 0)
          prefetch_positions<true>(kv, kv.v_layer, g, r.pos + r.count, std::min(r.pos + r.count + kPrefetchAhead, e));
        const float* wp = w + (r.pos - b);
        for (int64_t j = 0; j < r.count; ++j) {
          const __m256 vv = load8<kF32>(r.ptr + j * r.step, i);
          for (int h = 0; h < NQ; ++h) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(wp[h * stride + j]), vv, acc[h]);
        }
      }
      for (int h = 0; h < NQ; ++h) _mm256_storeu_ps(out + h * hd + i, acc[h]);
    }
  }
  template <class Fmt>
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t b, int64_t e) {
    if constexpr (Fmt::kBlocks) {
      weighted_sum_q<Fmt>(out, n_q, w, stride, kv, g, b, e);
    } else {
      for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
        weighted_sum_t<NQ, Fmt::kF32>(out + h0 * kv.head_dim, w + h0 * stride, stride, kv, g, b, e);
      });
    }
  }
  // --- Q8_0 / Q4_0 keys and values (the query quantized: QueryBlock) ---

  // The 32 products of a key block with a query block as 8 int32 lanes.
  // Q8_0: maddubs needs an unsigned operand: |k| times q with k's sign
  // (|k| <= 128, |q| <= 127: a pair sum stays below 2^15). Q4_0: the nibbles
  // (0..15) are unsigned already; the offset of 8 is taken off after the sum.
  template <class Fmt>
  static inline __m256i block_products(const uint8_t* kb, __m256i qv) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (Fmt::kQ4) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kb + kKvScaleBytes));
      const __m128i lo = _mm_set1_epi8(15);
      const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), lo), _mm_and_si128(x, lo));
      return _mm256_madd_epi16(_mm256_maddubs_epi16(u, qv), ones);
    } else {
      const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + kKvScaleBytes));
      return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(qv, kv)), ones);
    }
  }
  static inline short f16_bits(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return static_cast<short>(h);
  }
  // Lane j: the sum of the 8 lanes of v[j] (exact: integers).
  static inline __m256i reduce8(const __m256i* v) {
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
  }
  // Eight keys at a time, one block at a time: the block's 8 integer sums
  // come out in one vector (no horizontal sum per key), and its float step
  // s = s + float(isum) * (d_k * d_q) is the scalar twin's, lane by lane.
  template <int NQ, class Fmt>
  static void dots_block_q_t(const QueryBlock* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                             float scale, float* scores, int64_t stride) {
    const int64_t nb = n / kKvBlockValues, bb = Fmt::kBlockBytes;
    const __m256 vscale = _mm256_set1_ps(scale);
    int64_t j = 0;
    for (; j + 8 <= m; j += 8, k += 8 * step) {
      __m256 acc[NQ];
      for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* kb = k + b * bb;
        // The 8 keys' scales into one vector by inserts (a store to memory and a wide load would stall).
        const __m256 dk = _mm256_cvtph_ps(_mm_setr_epi16(f16_bits(kb), f16_bits(kb + step), f16_bits(kb + 2 * step),
                                                         f16_bits(kb + 3 * step), f16_bits(kb + 4 * step),
                                                         f16_bits(kb + 5 * step), f16_bits(kb + 6 * step),
                                                         f16_bits(kb + 7 * step)));
        for (int h = 0; h < NQ; ++h) {
          const QueryBlock& qb = q[h * nb + b];
          const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.q));
          __m256i p[8];
          for (int jj = 0; jj < 8; ++jj) p[jj] = block_products<Fmt>(kb + jj * step, qv);
          __m256i isum = reduce8(p);
          if constexpr (Fmt::kQ4) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * qb.sum));
          acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dk, _mm256_set1_ps(qb.d))));
        }
      }
      for (int h = 0; h < NQ; ++h) _mm256_storeu_ps(scores + h * stride + j, _mm256_mul_ps(acc[h], vscale));
    }
    if (j < m) ScalarOps::dots_block_q<Fmt>(q, NQ, k, m - j, step, n, scale, scores + j, stride);
  }
  template <class Fmt>
  static void dots_block_q(const QueryBlock* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                           float scale, float* scores, int64_t stride) {
    for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
      dots_block_q_t<NQ, Fmt>(q + h0 * (n / kKvBlockValues), k, m, step, n, scale, scores + h0 * stride, stride);
    });
  }

  // 8 values of a quantized vector as floats, without the block's scale:
  // dimensions [i, i + 8) of the block at kb (i % 8 == 0, i < 32).
  template <class Fmt>
  static inline __m256 load8_q(const uint8_t* kb, int64_t i) {
    if constexpr (Fmt::kQ4) {
      __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kb + kKvScaleBytes + (i & 15)));
      if (i >= 16) x = _mm_srli_epi16(x, 4);
      x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(15)), _mm_set1_epi8(8));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
    } else {
      return _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(kb + kKvScaleBytes + i))));
    }
  }
  // A slice of W 8-float vectors inside one 32-value block, outer; keys
  // inner: each key's scale is folded into its weight once per head.
  template <int NQ, int W, class Fmt>
  static void weighted_sum_q_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                               int64_t b, int64_t e) {
    const int64_t hd = kv.head_dim, bb = Fmt::kBlockBytes;
    for (int64_t d0 = 0; d0 < hd; d0 += 8 * W) {
      const int64_t blk = d0 / kKvBlockValues, in = d0 % kKvBlockValues;
      __m256 acc[NQ][W];
      for (int h = 0; h < NQ; ++h)
        for (int u = 0; u < W; ++u) acc[h][u] = _mm256_setzero_ps();
      for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();) {
        if (d0 == 0)
          prefetch_positions<true>(kv, kv.v_layer, g, r.pos + r.count, std::min(r.pos + r.count + kPrefetchAhead, e));
        const float* wp = w + (r.pos - b);
        const uint8_t* v = r.ptr + blk * bb;
        for (int64_t j = 0; j < r.count; ++j, v += r.step) {
          uint16_t dh;
          std::memcpy(&dh, v, 2);
          const float d = _cvtsh_ss(dh);
          __m256 vv[W];
          for (int u = 0; u < W; ++u) vv[u] = load8_q<Fmt>(v, in + 8 * u);
          for (int h = 0; h < NQ; ++h) {
            const __m256 c = _mm256_set1_ps(wp[h * stride + j] * d);
            for (int u = 0; u < W; ++u) acc[h][u] = _mm256_fmadd_ps(c, vv[u], acc[h][u]);
          }
        }
      }
      for (int h = 0; h < NQ; ++h)
        for (int u = 0; u < W; ++u) _mm256_storeu_ps(out + h * hd + d0 + 8 * u, acc[h][u]);
    }
  }
  // The widest slice (4, 2 or 1 vectors) that keeps at most 12 accumulators.
  template <class Fmt>
  static void weighted_sum_q(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv,
                             int64_t g, int64_t b, int64_t e) {
    for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
      constexpr int W = NQ * 4 <= 12 ? 4 : NQ * 2 <= 12 ? 2 : 1;
      weighted_sum_q_t<NQ, W, Fmt>(out + h0 * kv.head_dim, w + h0 * stride, stride, kv, g, b, e);
    });
  }

  static float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hsum(__m256 acc) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <bool kF32>
  static inline __m256 load8(const uint8_t* p, int64_t i) {
    return kF32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i)
                : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
};
}  // namespace
}  // namespace tally
#endif
