// The probe's AVX2 loops (built with -mavx2 -mfma; see peak_loops.h).
#include "bench/peak_loops.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace tally::probe {

// Streams p with 4 independent sums, asking for the lines 8 KiB ahead as the
// matrix kernels do: the probe then reads as fast as they can (two cores
// read ~12% more with it on AMD Zen 5).
uint64_t read_sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192 + 64), _MM_HINT_T0);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  return out[0] + out[1] + out[2] + out[3];
}

// 8 independent FMA chains of 8 lanes hide the FMA latency.
float fma_loop_avx2(int64_t iters) {
  __m256 acc[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm256_set1_ps(0.001f * static_cast<float>(k));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  __m256 s = acc[0];
  for (int k = 1; k < kFmaChains; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0];
}

// The kernels' AVX2 int8 step: u8 x s8 pairs into i16 (vpmaddubsw), i16
// pairs into i32 (vpmaddwd with ones), added to an accumulator. Six chains:
// 3 unsigned x 2 signed operands, hidden from the optimizer once per
// iteration, so all 6 products are distinct and computed every time (and 15
// registers hold everything: no spills). Small values keep the i16 sums from
// saturating.
int32_t int8_loop_avx2(int64_t iters) {
  static_assert(kInt8ChainsAvx2 == 6);
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5);
  __m256i u0 = _mm256_set1_epi8(3), u1 = _mm256_set1_epi8(5), u2 = _mm256_set1_epi8(7);
  __m256i s0 = _mm256_set1_epi8(-2), s1 = _mm256_set1_epi8(2);
  const __m256i ones = _mm256_set1_epi16(1);
  auto mac = [&](__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones); };
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(u0), "+x"(u1), "+x"(u2), "+x"(s0), "+x"(s1));
    a0 = _mm256_add_epi32(a0, mac(u0, s0));
    a1 = _mm256_add_epi32(a1, mac(u1, s0));
    a2 = _mm256_add_epi32(a2, mac(u2, s0));
    a3 = _mm256_add_epi32(a3, mac(u0, s1));
    a4 = _mm256_add_epi32(a4, mac(u1, s1));
    a5 = _mm256_add_epi32(a5, mac(u2, s1));
  }
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                       _mm256_add_epi32(a4, a5));
  return _mm256_extract_epi32(sum, 0);
}

}  // namespace tally::probe

#else  // not built for x86 AVX2: the probe never calls these

namespace tally::probe {
uint64_t read_sum_avx2(const uint8_t*, size_t) { return 0; }
float fma_loop_avx2(int64_t) { return 0; }
int32_t int8_loop_avx2(int64_t) { return 0; }
}  // namespace tally::probe

#endif
