// The probe's AVX-512 loops (built with -mavx512f -mavx512bw -mavx512vnni;
// see peak_loops.h).
#include "bench/peak_loops.h"

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <immintrin.h>

namespace tally::probe {

// The same as fma_loop_avx2 with 16 lanes, for CPUs whose widest FMA is AVX-512's.
float fma_loop_avx512(int64_t iters) {
  __m512 acc[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm512_set1_ps(0.001f * static_cast<float>(k));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  __m512 s = acc[0];
  for (int k = 1; k < kFmaChains; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: g++ 12 warns inside it)
  _mm512_store_ps(out, s);
  return out[0];
}

// 16 accumulators of 512-bit vpdpbusd (32 zmm registers leave room).
int32_t int8_loop_vnni512(int64_t iters) {
  __m512i acc[kInt8ChainsVnni512];
  for (int k = 0; k < kInt8ChainsVnni512; ++k) acc[k] = _mm512_set1_epi32(k);
  __m512i u = _mm512_set1_epi8(3);
  const __m512i s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+v"(u));
    for (int k = 0; k < kInt8ChainsVnni512; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], u, s);
  }
  __m512i sum = acc[0];
  for (int k = 1; k < kInt8ChainsVnni512; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, sum);
  return out[0];
}

}  // namespace tally::probe

#else

namespace tally::probe {
float fma_loop_avx512(int64_t) { return 0; }
int32_t int8_loop_vnni512(int64_t) { return 0; }
}  // namespace tally::probe

#endif
