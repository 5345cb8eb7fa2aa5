#include "kernels/ops.h"

#include <cmath>
#include <limits>

#include "core/half.h"
#include "kernels/cpu_features.h"
#include "kernels/exp_simd.h"

namespace tally {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  double ss = 0;  // double: the sum of 576+ squares loses bits in float
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void to_f16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

#if TALLY_HAVE_X86
namespace {
TALLY_AVX2 void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  silu_mul_scalar(gate + i, up + i, out + i, n - i);
}

TALLY_AVX2 void to_f16_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  to_f16_scalar(x + i, out + i, n - i);
}
}  // namespace
#endif

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
#if TALLY_HAVE_X86
  if (simd_at_least(SimdLevel::Avx2)) return silu_mul_avx2(gate, up, out, n);
#endif
  silu_mul_scalar(gate, up, out, n);
}

void to_f16(const float* x, uint16_t* out, int64_t n) {
#if TALLY_HAVE_X86
  if (simd_at_least(SimdLevel::Avx2)) return to_f16_avx2(x, out, n);
#endif
  to_f16_scalar(x, out, n);
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void softmax(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
  if (!std::isfinite(mx)) {  // all masked: define the result as uniform zeros
    for (int64_t i = 0; i < n; ++i) x[i] = 0;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope_angles(int64_t pos, int64_t rot_dims, float base, float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < rot_dims / 2; ++i) {
    const double theta = static_cast<double>(pos) * std::pow(static_cast<double>(base), -2.0 * i / rot_dims);
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dims, const float* cos_a,
                const float* sin_a, RopePairing pairing) {
  const int64_t half = rot_dims / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = pairing == RopePairing::Adjacent ? 2 * i : i;
      const int64_t b = pairing == RopePairing::Adjacent ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos_a[i] - x1 * sin_a[i];
      v[b] = x0 * sin_a[i] + x1 * cos_a[i];
    }
  }
}

}  // namespace tally
