#pragma once
// The 8-bit dot instructions of the matrix kernels (gemm_groups.h), for the
// translation units compiled for the instruction set they use
// (gemm_avx2.cpp: -mavx2 -mfma -mf16c, gemm_vnni.cpp: also -mavxvnni,
// gemm_avx512.cpp: AVX-512 F/BW/VL/VNNI); internal linkage keeps the copies apart.
#include "kernels/x86_intrinsics.h"  // first: see there

#include <cstring>

namespace tally {
namespace {

// Sums of 4 adjacent u8 x s8 products in 8 int32 lanes (exact for our ranges);
// dot_acc adds them to acc. Partial sums (part, part_acc, then widen to the 8
// int32 lanes): AVX2 keeps vpmaddubsw's 16-bit pair sums and widens once, so
// a caller may chain at most part_products(umax) of them into one part
// (umax: the largest unsigned operand); VNNI parts are already 32-bit.
constexpr int part_products(int umax) { return 32767 / (2 * 127 * umax); }
struct DotAvx2 {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot(u, s)); }
  static __m256i part(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
  static __m256i part_acc(__m256i p, __m256i u, __m256i s) { return _mm256_add_epi16(p, _mm256_maddubs_epi16(u, s)); }
  static __m256i widen(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }
};
#ifdef TALLY_TU_AVXVNNI
struct DotVnni {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i part(__m256i u, __m256i s) { return dot(u, s); }
  static __m256i part_acc(__m256i p, __m256i u, __m256i s) { return dot_acc(p, u, s); }
  static __m256i widen(__m256i p) { return p; }
};
#endif

// Weights stream from memory once per token: asking for the bytes 8 KiB ahead
// of the current group (~20 rows of a 576-wide matrix) keeps enough loads in
// flight for one core to read at ~30 GB/s instead of ~23 (measured on AMD
// Zen 5; 2 KiB ahead was slower than none, as it competes with the hardware
// prefetcher).
constexpr int kPrefetch = 8192;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

}  // namespace
}  // namespace tally
