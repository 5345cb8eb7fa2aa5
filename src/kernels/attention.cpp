#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/simd_avx2.h"

namespace tally {
namespace {

constexpr int64_t kMaxGroup = 8;  // heads per pass of the SIMD group kernel

// The two primitives attention needs over a stored vector: dot with q, and out += w * v.
template <typename Ops>
void weighted_sum_by_key(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                         int64_t n_used);

// dots: scores[h * stride] = (q_h . k) * scale for the n_q heads;
// axpys: out_h += w[h * stride] * v for the n_q heads.
struct ScalarOps {
  static void dots(const float* q, int64_t n_q, const uint8_t* k, int64_t n, DType t, float scale, float* scores,
                   int64_t stride) {
    for (int64_t h = 0; h < n_q; ++h) scores[h * stride] = dot(q + h * n, k, n, t) * scale;
  }
  static void axpys(float* out, int64_t n_q, const float* w, int64_t stride, const uint8_t* v, int64_t n, DType t) {
    for (int64_t h = 0; h < n_q; ++h) axpy(out + h * n, w[h * stride], v, n, t);
  }
  // dots for m keys `step` bytes apart: scores[h * stride + j] for key j.
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, DType t,
                         float scale, float* scores, int64_t stride) {
    for (int64_t j = 0; j < m; ++j) dots(q, n_q, k + j * step, n, t, scale, scores + j, stride);
  }
  static void softmax(float* x, int64_t n) { tally::softmax(x, n); }
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t n_used);
  static float dot(const float* q, const uint8_t* k, int64_t n, DType t) {
    float s = 0;
    if (t == DType::F32) {
      const float* kf = reinterpret_cast<const float*>(k);
      for (int64_t i = 0; i < n; ++i) s += q[i] * kf[i];
    } else {
      const uint16_t* kh = reinterpret_cast<const uint16_t*>(k);
      for (int64_t i = 0; i < n; ++i) s += q[i] * f16_to_f32(kh[i]);
    }
    return s;
  }
  static void axpy(float* out, float w, const uint8_t* v, int64_t n, DType t) {
    if (t == DType::F32) {
      const float* vf = reinterpret_cast<const float*>(v);
      for (int64_t i = 0; i < n; ++i) out[i] += w * vf[i];
    } else {
      const uint16_t* vh = reinterpret_cast<const uint16_t*>(v);
      for (int64_t i = 0; i < n; ++i) out[i] += w * f16_to_f32(vh[i]);
    }
  }
};

#if TALLY_HAVE_X86
struct Avx2Ops {
  // The key (value) is converted once per 8 dimensions and used by every head.
  TALLY_AVX2 static void dots(const float* q, int64_t n_q, const uint8_t* k, int64_t n, DType t, float scale,
                              float* scores, int64_t stride) {
    if (n % 8 != 0 || n_q > kMaxGroup) {
      for (int64_t h = 0; h < n_q; ++h) scores[h * stride] = dot(q + h * n, k, n, t) * scale;
      return;
    }
    __m256 acc[kMaxGroup];
    for (int64_t h = 0; h < n_q; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
      const __m256 kv = load8(k, i, t);
      for (int64_t h = 0; h < n_q; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * n + i), kv, acc[h]);
    }
    for (int64_t h = 0; h < n_q; ++h) scores[h * stride] = hsum(acc[h]) * scale;
  }
  template <int NQ, bool kF32>
  TALLY_AVX2 static void dots_block_t(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                                      float scale, float* scores, int64_t stride) {
    for (int64_t j = 0; j < m; ++j, k += step) {
      __m256 acc[NQ];
      for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t i = 0; i < n; i += 8) {
        const __m256 kv = kF32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(k) + i)
                               : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + 2 * i)));
        for (int h = 0; h < NQ; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * n + i), kv, acc[h]);
      }
      for (int h = 0; h < NQ; ++h) scores[h * stride + j] = hsum(acc[h]) * scale;
    }
  }
  template <int NQ>
  TALLY_AVX2 static void dots_block_n(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, DType t,
                                      float scale, float* scores, int64_t stride) {
    if (t == DType::F32) return dots_block_t<NQ, true>(q, k, m, step, n, scale, scores, stride);
    dots_block_t<NQ, false>(q, k, m, step, n, scale, scores, stride);
  }
  TALLY_AVX2 static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
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
    for (int64_t j = 0; j < m; ++j) dots(q, n_q, k + j * step, n, t, scale, scores + j, stride);
  }
  TALLY_AVX2 static void axpys(float* out, int64_t n_q, const float* w, int64_t stride, const uint8_t* v, int64_t n,
                               DType t) {
    if (n % 8 != 0) {
      for (int64_t h = 0; h < n_q; ++h) ScalarOps::axpy(out + h * n, w[h * stride], v, n, t);
      return;
    }
    for (int64_t i = 0; i < n; i += 8) {
      const __m256 vv = load8(v, i, t);
      for (int64_t h = 0; h < n_q; ++h)
        _mm256_storeu_ps(out + h * n + i,
                         _mm256_fmadd_ps(_mm256_set1_ps(w[h * stride]), vv, _mm256_loadu_ps(out + h * n + i)));
    }
  }
  // exp for x <= 0 (Cephes-style: 2^n * polynomial); -inf gives exactly 0.
  TALLY_AVX2 static __m256 exp_nonpos(__m256 x) {
    const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    const __m256 is_inf = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(is_inf, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  }
  TALLY_AVX2 static void softmax(float* x, int64_t n) {
    if (n < 8) return ScalarOps::softmax(x, n);
    __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mx = hmax(vmax);
    for (; i < n; ++i) mx = std::fmax(mx, x[i]);
    if (!std::isfinite(mx)) return ScalarOps::softmax(x, n);
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
      const __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
      _mm256_storeu_ps(x + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    double sum = hsum(vsum);
    for (; i < n; ++i) {
      x[i] = std::exp(x[i] - mx);
      sum += x[i];
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; ++i) x[i] *= static_cast<float>(1.0 / sum);
  }
  // Dimension slices outer, keys inner: the group's partial outputs stay in registers.
  template <int NQ, bool kF32>
  TALLY_AVX2 static void weighted_sum_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                        int64_t n_used) {
    const int64_t hd = kv.head_dim, bs = kv.block_size;
    const uint64_t step = kv.pos_stride * (kF32 ? 4 : 2);
    for (int64_t i = 0; i < hd; i += 8) {
      __m256 acc[NQ];
      for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t p0 = 0; p0 < n_used; p0 += bs) {
        const uint8_t* v = kv.v_head(p0 / bs, g);
        const int64_t m = std::min(bs, n_used - p0);
        for (int64_t j = 0; j < m; ++j) {
          const uint8_t* vj = v + j * step;
          const __m256 vv = kF32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(vj) + i)
                                 : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vj + 2 * i)));
          for (int h = 0; h < NQ; ++h) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(w[h * stride + p0 + j]), vv, acc[h]);
        }
      }
      for (int h = 0; h < NQ; ++h) _mm256_storeu_ps(out + h * hd + i, acc[h]);
    }
  }
  template <int NQ>
  TALLY_AVX2 static void weighted_sum_n(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                        int64_t n_used) {
    if (kv.type == DType::F32) return weighted_sum_t<NQ, true>(out, w, stride, kv, g, n_used);
    weighted_sum_t<NQ, false>(out, w, stride, kv, g, n_used);
  }
  TALLY_AVX2 static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv,
                                      int64_t g, int64_t n_used) {
    if (kv.head_dim % 8 == 0) {
      switch (n_q) {
        case 1: return weighted_sum_n<1>(out, w, stride, kv, g, n_used);
        case 2: return weighted_sum_n<2>(out, w, stride, kv, g, n_used);
        case 3: return weighted_sum_n<3>(out, w, stride, kv, g, n_used);
        case 4: return weighted_sum_n<4>(out, w, stride, kv, g, n_used);
        case 8: return weighted_sum_n<8>(out, w, stride, kv, g, n_used);
        default: break;
      }
    }
    weighted_sum_by_key<Avx2Ops>(out, n_q, w, stride, kv, g, n_used);
  }
  TALLY_AVX2 static float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  TALLY_AVX2 static float hsum(__m256 acc) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  TALLY_AVX2 static inline __m256 load8(const uint8_t* p, int64_t i, DType t) {
    return t == DType::F32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i)
                           : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
  TALLY_AVX2 static float dot(const float* q, const uint8_t* k, int64_t n, DType t) {
    if (n % 8 != 0) return ScalarOps::dot(q, k, n, t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, i, t), acc);
    return hsum(acc);
  }
  TALLY_AVX2 static void axpy(float* out, float w, const uint8_t* v, int64_t n, DType t) {
    if (n % 8 != 0) return ScalarOps::axpy(out, w, v, n, t);
    const __m256 vw = _mm256_set1_ps(w);
    for (int64_t i = 0; i < n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(vw, load8(v, i, t), _mm256_loadu_ps(out + i)));
  }
};
#else
using Avx2Ops = ScalarOps;
#endif

// Scores of n_q heads against keys [0, n_keys), softmax, then the weighted sum
// of values; every key and value is read once for the whole group. Per head the
// operations and their order are those of a single-head pass.
template <typename Ops>
void attend_impl(const float* q, int64_t n_q, const KvLayerView& kv, int64_t g, int64_t n_keys, float scale,
                 float* scores, float* out, int64_t n_visible) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const uint64_t step = kv.pos_stride * (kv.type == DType::F32 ? 4 : 2);
  for (int64_t p0 = 0; p0 < n_keys; p0 += bs) {
    const uint8_t* k = kv.k_head(p0 / bs, g);
    const int64_t m = std::min(bs, n_keys - p0);
    Ops::dots_block(q, n_q, k, m, step, hd, kv.type, scale, scores + p0, n_keys);
  }
  const int64_t n_used = n_visible >= 0 ? std::min(n_visible, n_keys) : n_keys;
  for (int64_t h = 0; h < n_q; ++h) {
    float* sc = scores + h * n_keys;
    // Masked scores were computed (the dense form) but weigh exactly 0: the
    // softmax runs over the visible ones only, as in the causal pass.
    for (int64_t j = n_used; j < n_keys; ++j) sc[j] = 0;
    Ops::softmax(sc, n_used);
  }
  Ops::weighted_sum(out, n_q, scores, n_keys, kv, g, n_used);
}

// out_h = sum over keys j < n_used of w[h * stride + j] * v_j, one key at a time.
template <typename Ops>
void weighted_sum_by_key(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                         int64_t n_used) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const uint64_t step = kv.pos_stride * (kv.type == DType::F32 ? 4 : 2);
  std::memset(out, 0, static_cast<size_t>(n_q * hd) * sizeof(float));
  for (int64_t p0 = 0; p0 < n_used; p0 += bs) {
    const uint8_t* v = kv.v_head(p0 / bs, g);
    const int64_t m = std::min(bs, n_used - p0);
    for (int64_t j = 0; j < m; ++j) Ops::axpys(out, n_q, w + p0 + j, stride, v + j * step, hd, kv.type);
  }
}

void ScalarOps::weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                             int64_t n_used) {
  weighted_sum_by_key<ScalarOps>(out, n_q, w, stride, kv, g, n_used);
}

}  // namespace

void attend_scalar(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                   float* scores, float* out, int64_t n_visible) {
  attend_impl<ScalarOps>(q, 1, kv, kv_head, n_keys, scale, scores, out, n_visible);
}

void attend(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale, float* scores,
            float* out, int64_t n_visible) {
  attend_group(q, 1, kv, kv_head, n_keys, scale, scores, out, n_visible);
}

void attend_group(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                  float* scores, float* out, int64_t n_visible) {
  if (simd_at_least(SimdLevel::Avx2))
    return attend_impl<Avx2Ops>(q, n_q, kv, kv_head, n_keys, scale, scores, out, n_visible);
  attend_impl<ScalarOps>(q, n_q, kv, kv_head, n_keys, scale, scores, out, n_visible);
}

}  // namespace tally
