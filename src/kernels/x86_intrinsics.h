#pragma once
// <immintrin.h> for the SIMD translation units. Include this before anything
// else that includes <immintrin.h>: g++ 12
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
#else
#include <immintrin.h>
#endif
#endif

