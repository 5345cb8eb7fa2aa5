#pragma once
// Marks functions compiled for AVX2+FMA+F16C. They are only called after
// simd_level() confirmed the CPU has them, so no -march flag is needed.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TALLY_HAVE_X86 1
#define TALLY_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define TALLY_HAVE_X86 0
#define TALLY_AVX2
#endif
