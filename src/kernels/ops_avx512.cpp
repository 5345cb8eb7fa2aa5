// AVX-512 kernels of the element-wise steps (compiled with -mavx512f/bw/vl
// besides AVX2; called only when the CPU has them): the activation quantizer,
// the SwiGLU and GELU products and the exp, 16 floats at a time. Their
// arithmetic is the AVX2 kernels' (ops_avx2.cpp) lane by lane, so they give
// the same bits; a tail shorter than a vector runs masked, not through the
// scalar twin.
#include "kernels/x86_intrinsics.h"  // first: see there

#include "kernels/activation_q8.h"
#include "kernels/exp_simd.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace tally {

#ifdef TALLY_TU_AVX512
namespace {

// quantize_row_q8_scalar's steps: the scale from the largest magnitude,
// round to nearest even, saturate to int8, the exact integer sum.
void quantize_row_q8_avx512(const float* x, BlockQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d >= 0x1p-126f ? 1.0f / d : 0.0f;  // a subnormal d has no finite 1/d: the block becomes 0
    const __m512 vid = _mm512_set1_ps(id);
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // rounded, so truncation is exact
    const __m512i q0 = _mm512_cvttps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), kNearest));
    const __m512i q1 = _mm512_cvttps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), kNearest));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
    out[b].d = d;
    const __m512i s16 = _mm512_add_epi32(q0, q1);
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s16), _mm512_extracti64x4_epi64(s16, 1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

// f(i, mask) for each 16 floats of n; the last partial vector's mask holds
// only the lanes inside (its loads give zeros past the end, its stores skip them).
template <class F>
inline void each16(int64_t n, F&& f) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    f(i, m);
  }
}

// gate / (1 + e^-t) * up, as the AVX2 kernels round it.
inline __m512 sigmoid_mul(__m512 x, __m512 t, __m512 up) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), t));
  return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), up);
}

void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 g = _mm512_mask_loadu_ps(_mm512_setzero_ps(), m, gate + i);
    _mm512_mask_storeu_ps(out + i, m, sigmoid_mul(g, g, _mm512_mask_loadu_ps(_mm512_setzero_ps(), m, up + i)));
  });
}

void gelu_tanh_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 two_c = _mm512_set1_ps(kGeluTwoC), cubic = _mm512_set1_ps(kGeluCubic);
  each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 x = _mm512_mask_loadu_ps(_mm512_setzero_ps(), m, gate + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 t = _mm512_mul_ps(two_c, _mm512_add_ps(x, _mm512_mul_ps(cubic, x3)));
    _mm512_mask_storeu_ps(out + i, m, sigmoid_mul(x, t, _mm512_mask_loadu_ps(_mm512_setzero_ps(), m, up + i)));
  });
}

void exp_each_avx512(const float* x, float* out, int64_t n) {
  each16(n, [&](int64_t i, __mmask16 m) {
    _mm512_mask_storeu_ps(out + i, m, exp16(_mm512_mask_loadu_ps(_mm512_setzero_ps(), m, x + i)));
  });
}

}  // namespace

void install_ops_avx512(KernelTable& t) {
  t.quantize_q8 = quantize_row_q8_avx512;
  t.silu_mul = silu_mul_avx512;
  t.gelu_tanh_mul = gelu_tanh_mul_avx512;
  t.exp_each = exp_each_avx512;
}
#else
void install_ops_avx512(KernelTable&) {}
#endif

}  // namespace tally
