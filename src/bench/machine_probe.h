#pragma once
// What this machine can do at most, measured rather than assumed, so that a
// benchmark's "% of the limit" is honest: the memory read bandwidth (streaming
// a buffer far larger than the caches), the f32 FMA peak and the 8-bit
// integer dot-product peak, each with N threads. The matrices run as 8-bit
// products, so prefill is honestly measured against the int8 peak (the f32
// peak is about 4x lower and flatters it).
//
// Each peak uses the widest instructions the kernels use at the current SIMD
// level (kernels/cpu_features: simd_level()), from the loops of peak_loops.h.
#include <cstdint>

#include "kernels/cpu_features.h"

namespace tally {

// The instruction sequence an int8 peak is measured with.
enum class Int8Kind {
  Scalar,       // plain C++ (the scalar reference kernels)
  Avx2Maddubs,  // vpmaddubsw + vpmaddwd + vpaddd, 256-bit
  Vnni256,      // vpdpbusd, 256-bit (AVX-VNNI)
  Vnni512,      // vpdpbusd, 512-bit (AVX-512 VNNI)
};

// The kind the kernels of `level` use.
Int8Kind int8_kind_for(SimdLevel level);
const char* int8_kind_name(Int8Kind k);  // e.g. "vpmaddubsw+vpmaddwd 256-bit"
// u8 x s8 multiply-adds one iteration of that kind's loop does (chains x lanes).
int64_t int8_macs_per_iteration(Int8Kind k);
// 10^9 operations per second of `threads` threads that each ran `iters`
// iterations of `macs_per_iter` multiply-adds in `seconds`, counting a
// multiply-add as 2 operations (as GFLOP/s counts an FMA).
double giga_ops_per_second(int threads, int64_t iters, int64_t macs_per_iter, double seconds);

struct MachineLimits {
  int threads = 1;
  double read_gbps = 0;   // GB/s (10^9 bytes)
  double fma_gflops = 0;  // GFLOP/s, 2 flops per FMA lane
  double int8_gops = 0;   // GOP/s, 2 ops per u8 x s8 multiply-add
  const char* simd = "";
  const char* int8_kind = "";  // int8_kind_name of the loop measured
};

MachineLimits probe_machine(int threads);

}  // namespace tally
