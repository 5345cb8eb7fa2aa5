#pragma once
// e^x on 8 (AVX2) or 16 (AVX-512) floats, within 0.55 ulp (glibc's expf,
// the scalar twin, is within 0.502), the two levels giving the same bits.
// The result is the correctly rounded float but for about 0.8% of inputs
// drawn evenly from [-104, 89] (0.08% of all floats there), and then its
// neighbour. An earlier float polynomial of about 2 ulp had moved the logits
// away from the HF reference; this one reads the last bits from a table
// instead and rounds once. -inf gives exactly 0.
// For the translation units compiled for AVX2 (exp8) and AVX-512 (exp16).
#include "kernels/x86_intrinsics.h"

#ifdef __AVX2__
namespace tally {
namespace {  // internal linkage: each SIMD file keeps its own copies
namespace exp_f32 {
// x is clamped to [kLo, kHi] (e^x is 0 below, infinite above). Then
// x = (16 k + j) ln2/16 + r, |r| <= ln2/32: e^x = 2^k * 2^(j/16) * e^r.
// 2^(j/16) = kPow2Hi[j] + kPow2Lo[j] (two floats: 48 bits), e^r - 1 = q by Taylor
// to degree 4 (truncation 4e-11), and 2^(j/16) e^r = hi + (hi q + lo) rounds
// once, at the add. n = 16 k + j comes from adding kShift (1.5 * 2^23): the
// sum's low bits are n in two's complement, so j is its low 4 bits.
inline constexpr float kLo = -104.0f, kHi = 89.0f, kShift = 0x1.8p23f, k16OverLn2 = 0x1.715476p+4f;
// ln2/16 = kLn2Hi + kLn2Lo: n kLn2Hi is exact inside the fma, and so is x - n kLn2Hi.
inline constexpr float kLn2Hi = 0x1.62ep-5f, kLn2Lo = 0x1.0bfbe8p-19f;
alignas(64) inline constexpr float kPow2Hi[16] = {
    0x1p+0f,       0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f, 0x1.306fep+0f,  0x1.3dea64p+0f,
    0x1.4bfdaep+0f, 0x1.5ab07ep+0f, 0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f,
    0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f};
alignas(64) inline constexpr float kPow2Lo[16] = {
    0x0p+0f,         0x1.9f3122p-25f,  -0x1.c15742p-27f, 0x1.ceac48p-25f,  0x1.4636e2p-25f, 0x1.824684p-25f,
    -0x1.593abcp-25f, -0x1.5bd5ecp-27f, 0x1.9fcef4p-26f,  -0x1.829fdp-25f,  0x1.15506ep-27f, 0x1.51f848p-27f,
    -0x1.a94b14p-26f, -0x1.3d56b2p-27f, -0x1.822dbcp-27f, 0x1.52486cp-27f};
}  // namespace exp_f32

// A 16-entry table read at each lane's low 4 index bits.
inline __m256 table16(const float* tab, __m256i j) {
  const __m256 a = _mm256_permutevar8x32_ps(_mm256_load_ps(tab), j);
  const __m256 b = _mm256_permutevar8x32_ps(_mm256_load_ps(tab + 8), j);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(j, 28)));  // bit 3 picks b
}

inline __m256 exp8(__m256 x) {
  using namespace exp_f32;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLo)), _mm256_set1_ps(kHi));
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(k16OverLn2), _mm256_set1_ps(kShift));
  const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(kShift));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 24), _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  const __m256 q = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  const __m256i ti = _mm256_castps_si256(t);
  const __m256 hi = table16(kPow2Hi, ti);
  const __m256 y = _mm256_add_ps(hi, _mm256_fmadd_ps(hi, q, table16(kPow2Lo, ti)));
  // y 2^k as (y 2^k1) 2^k2, k1 + k2 = k in [-151, 128], both factors normal:
  // only the last product rounds (a subnormal result), as AVX-512's scalef.
  const __m256i k = _mm256_srai_epi32(_mm256_sub_epi32(ti, _mm256_castps_si256(_mm256_set1_ps(kShift))), 4);
  const __m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1), bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

#ifdef TALLY_TU_AVX512
// exp8's steps on 16 lanes (the table by one permute, 2^k by scalef).
inline __m512 exp16(__m512 x) {
  using namespace exp_f32;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLo)), _mm512_set1_ps(kHi));
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(k16OverLn2), _mm512_set1_ps(kShift));
  const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(kShift));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 24), _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  const __m512 q = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  const __m512i ti = _mm512_castps_si512(t);  // the permute reads the low 4 bits of each index
  const __m512 hi = _mm512_permutexvar_ps(ti, _mm512_load_ps(kPow2Hi));
  const __m512 y = _mm512_add_ps(hi, _mm512_fmadd_ps(hi, q, _mm512_permutexvar_ps(ti, _mm512_load_ps(kPow2Lo))));
  return _mm512_scalef_ps(y, _mm512_mul_ps(n, _mm512_set1_ps(1.0f / 16)));  // scalef floors n/16 to k
}
#endif  // TALLY_TU_AVX512

}  // namespace
}  // namespace tally
#endif  // __AVX2__
