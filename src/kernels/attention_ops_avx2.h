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

struct Avx2Ops {
  // The key is converted once per 8 dimensions and used by every head.
  template <int NQ, bool kF32>
  static void dots_block_t(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                                      float scale, float* scores, int64_t stride) {
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
  template <int NQ>
  static void dots_block_n(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, DType t,
                                      float scale, float* scores, int64_t stride) {
    if (t == DType::F32) return dots_block_t<NQ, true>(q, k, m, step, n, scale, scores, stride);
    dots_block_t<NQ, false>(q, k, m, step, n, scale, scores, stride);
  }
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                                    DType t, float scale, float* scores, int64_t stride) {
    if (n % 8 == 0) {
      switch (n_q) {
        case 1: return dots_block_n<1>(q, k, m, step, n, t, scale, scores, stride);
        case 2: return dots_block_n<2>(q, k, m, step, n, t, scale, scores, stride);
        case 3: return dots_block_n<3>(q, k, m, step, n, t, scale, scores, stride);
        case 4: return dots_block_n<4>(q, k, m, step, n, t, scale, scores, stride);
        case 8: return dots_block_n<8>(q, k, m, step, n, t, scale, scores, stride);
        default: break;
      }
    }
    ScalarOps::dots_block(q, n_q, k, m, step, n, t, scale, scores, stride);
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
  static void weighted_sum_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                        int64_t b, int64_t e) {
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
  template <int NQ>
  static void weighted_sum_n(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                        int64_t b, int64_t e) {
    if (kv.type == DType::F32) return weighted_sum_t<NQ, true>(out, w, stride, kv, g, b, e);
    weighted_sum_t<NQ, false>(out, w, stride, kv, g, b, e);
  }
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv,
                                      int64_t g, int64_t b, int64_t e) {
    if (kv.head_dim % 8 == 0) {
      switch (n_q) {
        case 1: return weighted_sum_n<1>(out, w, stride, kv, g, b, e);
        case 2: return weighted_sum_n<2>(out, w, stride, kv, g, b, e);
        case 3: return weighted_sum_n<3>(out, w, stride, kv, g, b, e);
        case 4: return weighted_sum_n<4>(out, w, stride, kv, g, b, e);
        case 8: return weighted_sum_n<8>(out, w, stride, kv, g, b, e);
        default: break;
      }
    }
    ScalarOps::weighted_sum(out, n_q, w, stride, kv, g, b, e);
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
