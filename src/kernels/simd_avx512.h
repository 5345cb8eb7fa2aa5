#pragma once
// Marks functions compiled for AVX-512 (F, BW, VL) with AVX2, FMA and F16C.
// They are only called after simd_at_least(SimdLevel::Avx512Vnni) confirmed
// the CPU has them, so no -march flag is needed.
//
// Include this before anything else that includes <immintrin.h>: g++ 12
// reports the deliberately undefined source operand inside its own AVX-512
// intrinsics (_mm512_undefined_ps) as uninitialized (GCC bug 105593), and the
// warning follows the header's first inclusion.
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

#include "kernels/simd_avx2.h"

#if TALLY_HAVE_X86
#define TALLY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#else
#define TALLY_AVX512
#endif
