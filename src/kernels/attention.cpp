#include "kernels/attention.h"

#include "kernels/exp_simd.h"  // first: it includes <immintrin.h> as simd_avx512.h requires

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_runs.h"
#include "kernels/cpu_features.h"
#include "kernels/simd_avx2.h"

namespace tally {
namespace {

// The primitives of one chunk, per instruction set:
//   dots_block:   scores[h * stride + j] = (q_h . k_j) * scale for m keys `step` bytes apart;
//                 a key's score never depends on m or on the key's place among them.
//   exp_sum:      x[j] = exp(x[j] - max), returns the sum, writes the max.
//   weighted_sum: out_h = sum over positions p in [b, e) of w[h * stride + p - b] * v_p.
struct ScalarOps {
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, DType t,
                         float scale, float* scores, int64_t stride) {
    for (int64_t j = 0; j < m; ++j)
      for (int64_t h = 0; h < n_q; ++h) scores[h * stride + j] = dot(q + h * n, k + j * step, n, t) * scale;
  }
  static float exp_sum(float* x, int64_t n, float* max_out) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
    *max_out = mx;
    if (!std::isfinite(mx)) {  // every score -inf (or a NaN): the chunk weighs nothing
      for (int64_t i = 0; i < n; ++i) x[i] = 0;
      return 0;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    return static_cast<float>(sum);
  }
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t b, int64_t e) {
    const int64_t hd = kv.head_dim;
    std::memset(out, 0, static_cast<size_t>(n_q * hd) * sizeof(float));
    for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();)
      for (int64_t j = 0; j < r.count; ++j)
        for (int64_t h = 0; h < n_q; ++h)
          axpy(out + h * hd, w[h * stride + r.pos - b + j], r.ptr + j * r.step, hd, kv.type);
  }
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
  // The key is converted once per 8 dimensions and used by every head.
  template <int NQ, bool kF32>
  TALLY_AVX2 static void dots_block_t(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
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
    ScalarOps::dots_block(q, n_q, k, m, step, n, t, scale, scores, stride);
  }
  TALLY_AVX2 static float exp_sum(float* x, int64_t n, float* max_out) {
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
  TALLY_AVX2 static void weighted_sum_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
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
  TALLY_AVX2 static void weighted_sum_n(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                        int64_t b, int64_t e) {
    if (kv.type == DType::F32) return weighted_sum_t<NQ, true>(out, w, stride, kv, g, b, e);
    weighted_sum_t<NQ, false>(out, w, stride, kv, g, b, e);
  }
  TALLY_AVX2 static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv,
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
  template <bool kF32>
  TALLY_AVX2 static inline __m256 load8(const uint8_t* p, int64_t i) {
    return kF32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i)
                : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
};
#else
using Avx2Ops = ScalarOps;
#endif

// The AVX-512 kernels (attention_avx512.cpp) handle head sizes that fill
// 16-float vectors and groups of up to 8 heads; the rest goes to the AVX2 ones.
struct Avx512Ops {
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, DType t,
                         float scale, float* scores, int64_t stride) {
    if (!avx512_attention::dots_block(q, n_q, k, m, step, n, t, scale, scores, stride))
      Avx2Ops::dots_block(q, n_q, k, m, step, n, t, scale, scores, stride);
  }
  static float exp_sum(float* x, int64_t n, float* max_out) {
    float sum = 0;
    if (avx512_attention::exp_sum(x, n, max_out, &sum)) return sum;
    return ScalarOps::exp_sum(x, n, max_out);
  }
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t b, int64_t e) {
    if (!avx512_attention::weighted_sum(out, n_q, w, stride, kv, g, b, e))
      Avx2Ops::weighted_sum(out, n_q, w, stride, kv, g, b, e);
  }
};

template <typename Ops>
bool attend_chunk_impl(const float* q, int64_t n_q, const KvLayerView& kv, int64_t g, int64_t chunk, int64_t n_keys,
                       int64_t n_visible, float scale, float* scores, float* partial) {
  const int64_t b = chunk * kAttentionChunk;
  const int64_t e_keys = std::min(b + kAttentionChunk, n_keys), e_vis = std::min(e_keys, n_visible);
  const int64_t hd = kv.head_dim;
  // Past the cache's size the keys and values come from memory in one-block
  // runs: fetch keys kPrefetchAhead positions ahead of the dots, and this
  // run's values into L2 (the value kernels take them on into L1 just ahead).
  for (KvRuns r(kv, kv.k_layer, g, b, e_keys); r.next();) {
    prefetch_positions<true>(kv, kv.k_layer, g, std::min(r.pos + kPrefetchAhead, n_keys),
                             std::min(r.pos + r.count + kPrefetchAhead, n_keys));
    prefetch_positions<false>(kv, kv.v_layer, g, r.pos, std::min(r.pos + r.count, n_visible));
    Ops::dots_block(q, n_q, r.ptr, r.count, r.step, hd, kv.type, scale, scores + (r.pos - b), kAttentionChunk);
  }
  // Masked keys (the dense form) were scored but weigh nothing: they never enter the softmax.
  if (e_vis <= b) return false;
  float* mx = partial;
  float* sum = partial + n_q;
  for (int64_t h = 0; h < n_q; ++h) sum[h] = Ops::exp_sum(scores + h * kAttentionChunk, e_vis - b, mx + h);
  // The next chunk's keys (usually the same thread's next task) into L2
  // while the values are summed, so that memory is not idle meanwhile.
  prefetch_positions<false>(kv, kv.k_layer, g, std::min(e_keys + kPrefetchAhead, n_keys),
                            std::min(e_keys + kAttentionChunk, n_keys));
  Ops::weighted_sum(partial + 2 * n_q, n_q, scores, kAttentionChunk, kv, g, b, e_vis);
  return true;
}

template <typename Ops>
void attend_group_impl(const float* q, int64_t n_q, const KvLayerView& kv, int64_t g, int64_t n_keys, float scale,
                       float* scratch, float* out, int64_t n_visible) {
  n_visible = n_visible < 0 ? n_keys : std::min(n_visible, n_keys);
  float* scores = scratch;
  float* partials = scratch + attention_score_floats(n_q);
  const int64_t part = attention_partial_floats(n_q, kv.head_dim);
  int64_t used = 0;
  for (int64_t c = 0; c < attention_chunks(n_keys); ++c)
    used += attend_chunk_impl<Ops>(q, n_q, kv, g, c, n_keys, n_visible, scale, scores, partials + used * part);
  attention_merge(partials, used, n_q, kv.head_dim, out);
}

}  // namespace

void attention_merge(const float* partials, int64_t n_chunks, int64_t n_q, int64_t head_dim, float* out) {
  const int64_t part = attention_partial_floats(n_q, head_dim);
  for (int64_t h = 0; h < n_q; ++h) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < n_chunks; ++c) m = std::fmax(m, partials[c * part + h]);
    float* o = out + h * head_dim;
    std::memset(o, 0, static_cast<size_t>(head_dim) * sizeof(float));
    float l = 0;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float* p = partials + c * part;
      // A chunk of all -inf scores weighs nothing (its sum is 0 already).
      const float f = p[h] == m ? 1.0f : std::isfinite(p[h]) ? std::exp(p[h] - m) : 0.0f;
      l += p[n_q + h] * f;
      const float* po = p + 2 * n_q + h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) o[i] += po[i] * f;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) o[i] *= inv;
  }
}

bool attend_chunk(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t chunk, int64_t n_keys,
                  int64_t n_visible, float scale, float* scores, float* partial) {
  if (simd_at_least(SimdLevel::Avx512Vnni))
    return attend_chunk_impl<Avx512Ops>(q, n_q, kv, kv_head, chunk, n_keys, n_visible, scale, scores, partial);
  if (simd_at_least(SimdLevel::Avx2))
    return attend_chunk_impl<Avx2Ops>(q, n_q, kv, kv_head, chunk, n_keys, n_visible, scale, scores, partial);
  return attend_chunk_impl<ScalarOps>(q, n_q, kv, kv_head, chunk, n_keys, n_visible, scale, scores, partial);
}

void attend_group(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                  float* scratch, float* out, int64_t n_visible) {
  if (simd_at_least(SimdLevel::Avx512Vnni))
    return attend_group_impl<Avx512Ops>(q, n_q, kv, kv_head, n_keys, scale, scratch, out, n_visible);
  if (simd_at_least(SimdLevel::Avx2))
    return attend_group_impl<Avx2Ops>(q, n_q, kv, kv_head, n_keys, scale, scratch, out, n_visible);
  attend_group_impl<ScalarOps>(q, n_q, kv, kv_head, n_keys, scale, scratch, out, n_visible);
}

void attend(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale, float* scratch,
            float* out, int64_t n_visible) {
  attend_group(q, 1, kv, kv_head, n_keys, scale, scratch, out, n_visible);
}

void attend_scalar(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                   float* scratch, float* out, int64_t n_visible) {
  attend_group_impl<ScalarOps>(q, 1, kv, kv_head, n_keys, scale, scratch, out, n_visible);
}

}  // namespace tally
