#include "kernels/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/simd_avx2.h"

namespace tally {
namespace {

// The two primitives attention needs over a stored vector: dot with q, and out += w * v.
struct ScalarOps {
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
  TALLY_AVX2 static inline __m256 load8(const uint8_t* p, int64_t i, DType t) {
    return t == DType::F32 ? _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i)
                           : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
  TALLY_AVX2 static float dot(const float* q, const uint8_t* k, int64_t n, DType t) {
    if (n % 8 != 0) return ScalarOps::dot(q, k, n, t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, i, t), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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

template <typename Ops>
void attend_impl(const float* q, const KvLayerView& kv, int64_t g, int64_t n_keys, float scale, float* scores,
                 float* out, int64_t n_visible) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const uint64_t step = kv.pos_stride * (kv.type == DType::F32 ? 4 : 2);
  for (int64_t p0 = 0; p0 < n_keys; p0 += bs) {
    const uint8_t* k = kv.k_head(p0 / bs, g);
    const int64_t m = std::min(bs, n_keys - p0);
    for (int64_t j = 0; j < m; ++j) scores[p0 + j] = Ops::dot(q, k + j * step, hd, kv.type) * scale;
  }
  if (n_visible >= 0)
    for (int64_t j = n_visible; j < n_keys; ++j) scores[j] = -std::numeric_limits<float>::infinity();
  softmax(scores, n_keys);
  std::memset(out, 0, hd * sizeof(float));
  const int64_t n_used = n_visible >= 0 ? std::min(n_visible, n_keys) : n_keys;
  for (int64_t p0 = 0; p0 < n_used; p0 += bs) {
    const uint8_t* v = kv.v_head(p0 / bs, g);
    const int64_t m = std::min(bs, n_used - p0);
    for (int64_t j = 0; j < m; ++j) Ops::axpy(out, scores[p0 + j], v + j * step, hd, kv.type);
  }
}

}  // namespace

void attend_scalar(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                   float* scores, float* out, int64_t n_visible) {
  attend_impl<ScalarOps>(q, kv, kv_head, n_keys, scale, scores, out, n_visible);
}

void attend(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale, float* scores,
            float* out, int64_t n_visible) {
  if (simd_at_least(SimdLevel::Avx2))
    return attend_impl<Avx2Ops>(q, kv, kv_head, n_keys, scale, scores, out, n_visible);
  attend_impl<ScalarOps>(q, kv, kv_head, n_keys, scale, scores, out, n_visible);
}

}  // namespace tally
