#pragma once
// <immintrin.h> for the SIMD translation units, and the instruction sets the
// unit's kernels are built for: TALLY_TU_AVX512 (AVX-512 F/BW/VL/VNNI) and
// TALLY_TU_AVXVNNI, from the compiler's target flags or, in a
// TALLY_EMULATE_SIMD test build, from x86_emulated.h, which emulates both.
// Include this before anything else that includes <immintrin.h>: g++ 12 reports the deliberately undefined source operand inside its own AVX-512
// intrinsics (_mm512_undefined_ps) as uninitialized (GCC bug 105593), and the
// warning follows the header's first inclusion.
#if defined(TALLY_EMULATE_SIMD)
#include "kernels/x86_emulated.h"
#define TALLY_TU_AVX512 1
#define TALLY_TU_AVXVNNI 1
#elif defined(__x86_64__) || defined(__i386__)
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define TALLY_TU_AVX512 1
#endif
#if defined(__AVXVNNI__)
#define TALLY_TU_AVXVNNI 1
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif

