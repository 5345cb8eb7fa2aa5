// The probe's AVX-VNNI loop (built with -mavxvnni; see peak_loops.h).
#include "bench/peak_loops.h"

#if defined(__AVXVNNI__)
#include <immintrin.h>

namespace tally::probe {

// 12 accumulators: vpdpbusd's latency (4-5 cycles) times up to 2 per cycle.
int32_t int8_loop_vnni256(int64_t iters) {
  __m256i acc[kInt8ChainsVnni256];
  for (int k = 0; k < kInt8ChainsVnni256; ++k) acc[k] = _mm256_set1_epi32(k);
  __m256i u = _mm256_set1_epi8(3);
  const __m256i s = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(u));
    for (int k = 0; k < kInt8ChainsVnni256; ++k) acc[k] = _mm256_dpbusd_avx_epi32(acc[k], u, s);
  }
  __m256i sum = acc[0];
  for (int k = 1; k < kInt8ChainsVnni256; ++k) sum = _mm256_add_epi32(sum, acc[k]);
  return _mm256_extract_epi32(sum, 0);
}

}  // namespace tally::probe

#else

namespace tally::probe {
int32_t int8_loop_vnni256(int64_t) { return 0; }
}  // namespace tally::probe

#endif
