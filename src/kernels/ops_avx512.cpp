// AVX-512 kernels of the element-wise steps that evaluate e^x (compiled with
// -mavx512f/bw/vl besides AVX2; called only when the CPU has them): the
// SwiGLU and GELU products and the exp, 16 floats at a time. Their arithmetic
// is the AVX2 kernels' (ops_avx2.cpp) lane by lane, so they give the same
// bits; a tail shorter than a vector runs masked, not through the scalar twin.
#include "kernels/x86_intrinsics.h"  // first: see there

#include "kernels/exp_simd.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace tally {

#ifdef TALLY_TU_AVX512
namespace {

// out[i] = f(in[i]...) for n floats, 16 at a time; the last partial vector
// reads zeros past the end and writes only the lanes inside.
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
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    _mm512_mask_storeu_ps(out + i, m, sigmoid_mul(g, g, _mm512_maskz_loadu_ps(m, up + i)));
  });
}

void gelu_tanh_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 two_c = _mm512_set1_ps(kGeluTwoC), cubic = _mm512_set1_ps(kGeluCubic);
  each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 t = _mm512_mul_ps(two_c, _mm512_add_ps(x, _mm512_mul_ps(cubic, x3)));
    _mm512_mask_storeu_ps(out + i, m, sigmoid_mul(x, t, _mm512_maskz_loadu_ps(m, up + i)));
  });
}

void exp_each_avx512(const float* x, float* out, int64_t n) {
  each16(n, [&](int64_t i, __mmask16 m) { _mm512_mask_storeu_ps(out + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i))); });
}

}  // namespace

void install_ops_avx512(KernelTable& t) {
  t.silu_mul = silu_mul_avx512;
  t.gelu_tanh_mul = gelu_tanh_mul_avx512;
  t.exp_each = exp_each_avx512;
}
#else
void install_ops_avx512(KernelTable&) {}
#endif

}  // namespace tally
