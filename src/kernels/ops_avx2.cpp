// AVX2 kernels of the element-wise steps (this file is compiled with -mavx2
// -mfma -mf16c and only called after the CPU check): the activation
// quantizer (bit-identical to its scalar reference: same scale, same
// round-to-nearest-even), the SwiGLU and GELU products, the exp and the f16 rounding of K/V.
#include "kernels/x86_intrinsics.h"  // first: see there

#include "kernels/activation_q8.h"
#include "kernels/exp_simd.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace tally {

#ifdef __AVX2__
namespace {

void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[k]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d >= 0x1p-126f ? 1.0f / d : 0.0f;  // a subnormal d has no finite 1/d: the block becomes 0
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q32[4];
    for (int k = 0; k < 4; ++k)
      q32[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // Pack 32 int32 -> 32 int8; packs interleave 128-bit lanes, the permute restores order.
    const __m256i p01 = _mm256_packs_epi32(q32[0], q32[1]);
    const __m256i p23 = _mm256_packs_epi32(q32[2], q32[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p);
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q32[0], q32[1]), _mm256_add_epi32(q32[2], q32[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    out[b].d = d;
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  silu_mul_scalar(gate + i, up + i, out + i, n - i);
}

// gelu_tanh_mul_scalar's arithmetic, 8 at a time.
void gelu_tanh_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), two_c = _mm256_set1_ps(kGeluTwoC), cubic = _mm256_set1_ps(kGeluCubic);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 t = _mm256_mul_ps(two_c, _mm256_add_ps(x, _mm256_mul_ps(cubic, x3)));
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), t));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  gelu_tanh_mul_scalar(gate + i, up + i, out + i, n - i);
}

void exp_each_avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
  exp_each_scalar(x + i, out + i, n - i);
}

void to_f16_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  to_f16_scalar(x + i, out + i, n - i);
}
}  // namespace

void install_ops_avx2(KernelTable& t) {
  t.quantize_q8 = quantize_row_q8_avx2;
  t.silu_mul = silu_mul_avx2;
  t.gelu_tanh_mul = gelu_tanh_mul_avx2;
  t.to_f16 = to_f16_avx2;
  t.exp_each = exp_each_avx2;
}
#else
void install_ops_avx2(KernelTable&) {}
#endif

}  // namespace tally
