#pragma once
// AVX-512 and AVX-VNNI intrinsics emulated on AVX2, for testing only: with the
// CMake option TALLY_EMULATE_SIMD the *_avx512.cpp and *_vnni.cpp files are
// compiled without their instruction sets and include this instead of
// <immintrin.h>, so their kernels run (slowly) and are checked against the
// scalar twins on a CPU that has neither. SIMDe (Debian's libsimde-dev)
// provides the intrinsics; the few its 0.7.4 lacks (or, as scalef, gets wrong
// at the ends of the range) are written below with the
// lane semantics of Intel's reference, each from AVX2 halves.
#if !defined(TALLY_EMULATE_SIMD)
#error "x86_emulated.h is for TALLY_EMULATE_SIMD builds"
#endif

#define SIMDE_ENABLE_NATIVE_ALIASES
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include <simde/x86/avx512.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tally::emulated {

// A 512-bit value from and into two 256-bit halves (lanes 0-7 are the low one).
inline void join(void* out, const void* lo, const void* hi) {
  std::memcpy(out, lo, 32);
  std::memcpy(static_cast<char*>(out) + 32, hi, 32);
}
inline void split(const void* in, void* lo, void* hi) {
  std::memcpy(lo, in, 32);
  std::memcpy(hi, static_cast<const char*>(in) + 32, 32);
}

inline __m512i cvtepi8_epi32(__m128i a) {
  const __m256i lo = _mm256_cvtepi8_epi32(a), hi = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(a, a));
  __m512i r;
  join(&r, &lo, &hi);
  return r;
}
inline __m512i cvtepu8_epi32(__m128i a) {
  const __m256i lo = _mm256_cvtepu8_epi32(a), hi = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(a, a));
  __m512i r;
  join(&r, &lo, &hi);
  return r;
}
inline __m512 cvtepi32_ps(__m512i a) {
  __m256i lo, hi;
  split(&a, &lo, &hi);
  const __m256 flo = _mm256_cvtepi32_ps(lo), fhi = _mm256_cvtepi32_ps(hi);
  __m512 r;
  join(&r, &flo, &fhi);
  return r;
}
inline __m512i cvttps_epi32(__m512 a) {
  __m256 lo, hi;
  split(&a, &lo, &hi);
  const __m256i ilo = _mm256_cvttps_epi32(lo), ihi = _mm256_cvttps_epi32(hi);
  __m512i r;
  join(&r, &ilo, &ihi);
  return r;
}
inline __m512 cvtph_ps(__m256i a) {
  const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(a)), hi = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
  __m512 r;
  join(&r, &lo, &hi);
  return r;
}
// Masked-off lanes are neither read nor written (a tail may end at a page).
inline __m512 mask_loadu_ps(__m512 src, __mmask16 k, const float* p) {
  float v[16];
  std::memcpy(v, &src, sizeof(v));
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) v[i] = p[i];
  __m512 r;
  std::memcpy(&r, v, sizeof(r));
  return r;
}
inline void mask_storeu_ps(float* p, __mmask16 k, __m512 a) {
  float v[16];
  std::memcpy(v, &a, sizeof(v));
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) p[i] = v[i];
}
inline float reduce_max_ps(__m512 a) {
  __m256 lo, hi;
  split(&a, &lo, &hi);
  const __m256 m8 = _mm256_max_ps(hi, lo);
  const __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}
// a 2^floor(b) for finite b, rounded once. SIMDe's multiplies by 2^floor(b),
// which overflows for b >= 128 and flushes subnormals.
inline __m512 scalef_ps(__m512 a, __m512 b) {
  float x[16], e[16];
  std::memcpy(x, &a, sizeof(x));
  std::memcpy(e, &b, sizeof(e));
  for (int i = 0; i < 16; ++i) x[i] = std::scalbnf(x[i], static_cast<int>(std::clamp(std::floor(e[i]), -1000.0f, 1000.0f)));
  __m512 r;
  std::memcpy(&r, x, sizeof(r));
  return r;
}
// AVX-VNNI's vpdpbusd is AVX-512 VNNI's on 256 bits, with a VEX encoding.
inline __m256i dpbusd_avx_epi32(__m256i acc, __m256i u, __m256i s) { return simde_mm256_dpbusd_epi32(acc, u, s); }

}  // namespace tally::emulated

#define _mm512_cvttps_epi32(a) ::tally::emulated::cvttps_epi32(a)
#define _mm512_cvtepi8_epi32(a) ::tally::emulated::cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a) ::tally::emulated::cvtepu8_epi32(a)
#define _mm512_cvtepi32_ps(a) ::tally::emulated::cvtepi32_ps(a)
#define _mm512_cvtph_ps(a) ::tally::emulated::cvtph_ps(a)
#define _mm512_mask_loadu_ps(src, k, p) ::tally::emulated::mask_loadu_ps(src, k, p)
#define _mm512_mask_storeu_ps(p, k, a) ::tally::emulated::mask_storeu_ps(p, k, a)
#undef _mm512_scalef_ps  // SIMDe's, replaced
#define _mm512_scalef_ps(a, b) ::tally::emulated::scalef_ps(a, b)
#define _mm512_reduce_max_ps(a) ::tally::emulated::reduce_max_ps(a)
#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)
#define _mm256_dpbusd_avx_epi32(acc, u, s) ::tally::emulated::dpbusd_avx_epi32(acc, u, s)
