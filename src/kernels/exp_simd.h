#pragma once
// e^x on 8 (AVX2) or 16 (AVX-512) floats, evaluated in double precision and
// rounded once to float, so that it returns what a correctly rounded expf
// returns (glibc's is, to within its 0.502 ulp): kernels using it stay as
// accurate as their scalar references. A float polynomial (about 2 ulp) was
// measurably worse: in the SwiGLU and the attention softmax it moved the
// logits away from the HF reference. -inf gives exactly 0.
// For the translation units compiled for AVX2 (exp8) and AVX-512 (exp16).
#include "kernels/x86_intrinsics.h"

#ifdef __AVX2__
namespace tally {
namespace {  // internal linkage: each SIMD file keeps its own copies
namespace exp_f64 {
// Inputs are clamped to [kLo, kHi] (beyond float's range either way); then
// x = n ln2 + r with ln2 = kLn2Hi + kLn2Lo (Cody-Waite) and e^r by Taylor.
inline constexpr double kLo = -150.0, kHi = 100.0, kLog2e = 1.4426950408889634;
inline constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kInvFact[] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                                      1.0 / 120,      1.0 / 24,      1.0 / 6,      0.5,         1.0,        1.0};
}  // namespace exp_f64

// 4 doubles: 2^n e^r with r = x - n ln2, |r| <= ln2/2, Taylor to degree 11
// (truncation below 3e-13 relative).
inline __m256d exp4_f64(__m256d x) {
  using namespace exp_f64;
  x = _mm256_min_pd(_mm256_max_pd(x, _mm256_set1_pd(kLo)), _mm256_set1_pd(kHi));
  const __m256d n =
      _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kInvFact[0]);
  for (int i = 1; i < 12; ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFact[i]));
  // 2^n from the exponent bits (n in [-217, 145]: a normal double).
  const __m128i n32 = _mm256_cvtpd_epi32(n);
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(n32), _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
}

inline __m256 exp8(__m256 x) {
  const __m128 lo = _mm256_cvtpd_ps(exp4_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 hi = _mm256_cvtpd_ps(exp4_f64(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(hi, lo);
}

#ifdef TALLY_TU_AVX512
// 8 doubles, as exp4_f64.
inline __m512d exp8_f64(__m512d x) {
  using namespace exp_f64;
  x = _mm512_min_pd(_mm512_max_pd(x, _mm512_set1_pd(kLo)), _mm512_set1_pd(kHi));
  const __m512d n =
      _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kInvFact[0]);
  for (int i = 1; i < 12; ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFact[i]));
  const __m256i n32 = _mm512_cvtpd_epi32(n);
  const __m512i bits = _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(n32), _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(bits));
}

inline __m512 exp16(__m512 x) {
  const __m256 lo = _mm512_cvtpd_ps(exp8_f64(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
  const __m256 hi =
      _mm512_cvtpd_ps(exp8_f64(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
#endif  // TALLY_TU_AVX512

}  // namespace
}  // namespace tally
#endif  // __AVX2__
