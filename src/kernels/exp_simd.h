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
// Inputs are clamped to [kLo, kHi] (beyond float's range either way). Then
// x = (16 k + j) ln2/16 + r, |r| <= ln2/32: e^x = 2^k * 2^(j/16) * e^r, with
// 2^(j/16) from a table of correctly rounded doubles and e^r by Taylor to
// degree 6 (truncation below 5e-16 relative, far below float's half ulp).
// n = 16 k + j comes from adding kShift (1.5 * 2^52): the sum's low bits are
// n in two's complement, so j is its low 4 bits and k the rest.
inline constexpr double kLo = -150.0, kHi = 100.0, kShift = 0x1.8p52, k16OverLn2 = 0x1.71547652b82fep+4;
// ln2/16 = kLn2Hi + kLn2Lo, kLn2Hi with 41 significant bits: n kLn2Hi is exact for |n| < 2^12.
inline constexpr double kLn2Hi = 0x1.62e42fefa4000p-5, kLn2Lo = -0x1.8432a1b0e2634p-47;
inline constexpr double kInvFact[] = {1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
alignas(64) inline constexpr double kPow2Sixteenths[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0};
}  // namespace exp_f64

// 4 doubles (the steps above; the table by a gather).
inline __m256d exp4_f64(__m256d x) {
  using namespace exp_f64;
  x = _mm256_min_pd(_mm256_max_pd(x, _mm256_set1_pd(kLo)), _mm256_set1_pd(kHi));
  const __m256d t = _mm256_fmadd_pd(x, _mm256_set1_pd(k16OverLn2), _mm256_set1_pd(kShift));
  const __m256d n = _mm256_sub_pd(t, _mm256_set1_pd(kShift));
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kInvFact[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFact[i]));
  const __m256i ti = _mm256_castpd_si256(t);
  const __m256d f = _mm256_i64gather_pd(kPow2Sixteenths, _mm256_and_si256(ti, _mm256_set1_epi64x(15)), 8);
  // 2^k f: k added to f's exponent ((t >> 4) << 52 is k << 52, kShift's bits falling off the top).
  const __m256i scaled = _mm256_add_epi64(_mm256_castpd_si256(f), _mm256_slli_epi64(_mm256_srli_epi64(ti, 4), 52));
  return _mm256_mul_pd(p, _mm256_castsi256_pd(scaled));
}

inline __m256 exp8(__m256 x) {
  const __m128 lo = _mm256_cvtpd_ps(exp4_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 hi = _mm256_cvtpd_ps(exp4_f64(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(hi, lo);
}

#ifdef TALLY_TU_AVX512
// 8 doubles, as exp4_f64 (the table by a two-register permute).
inline __m512d exp8_f64(__m512d x) {
  using namespace exp_f64;
  x = _mm512_min_pd(_mm512_max_pd(x, _mm512_set1_pd(kLo)), _mm512_set1_pd(kHi));
  const __m512d t = _mm512_fmadd_pd(x, _mm512_set1_pd(k16OverLn2), _mm512_set1_pd(kShift));
  const __m512d n = _mm512_sub_pd(t, _mm512_set1_pd(kShift));
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kInvFact[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFact[i]));
  const __m512i ti = _mm512_castpd_si512(t);  // the permute reads the low 4 bits of each index
  const __m512d f = _mm512_permutex2var_pd(_mm512_load_pd(kPow2Sixteenths), ti, _mm512_load_pd(kPow2Sixteenths + 8));
  const __m512i scaled = _mm512_add_epi64(_mm512_castpd_si512(f), _mm512_slli_epi64(_mm512_srli_epi64(ti, 4), 52));
  return _mm512_mul_pd(p, _mm512_castsi512_pd(scaled));
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
