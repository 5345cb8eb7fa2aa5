#pragma once
// The inner loops of the machine probe (machine_probe.h), one translation
// unit per instruction set, each built with that set's flags only (see
// tally_simd_source_flags in CMakeLists.txt) and called only after the CPU
// check of kernels/cpu_features. Each loop returns a value made from its work
// so that the compiler cannot drop it, and its work per iteration is the
// constant beside it: the probe's op counts are these constants, nothing else.
//
// The int8 loops measure the products the matrix kernels use: unsigned 8-bit
// x signed 8-bit multiply-adds summed into 32-bit lanes. Their inputs are
// hidden from the optimizer each step (an empty asm), so every product is
// computed, and independent accumulators hide the instructions' latency.
#include <cstddef>
#include <cstdint>

namespace tally::probe {

// f32 FMA, 8 independent chains: 8 x 8 (AVX2) or 8 x 16 (AVX-512) FMAs per iteration.
inline constexpr int64_t kFmaChains = 8;
float fma_loop_avx2(int64_t iters);
float fma_loop_avx512(int64_t iters);

// AVX2: vpmaddubsw (32 u8 x s8 products, paired into 16 i16) + vpmaddwd
// (into 8 i32) + vpaddd per chain: 32 multiply-adds per chain per iteration.
inline constexpr int64_t kInt8ChainsAvx2 = 6;
int32_t int8_loop_avx2(int64_t iters);
// AVX-VNNI: one 256-bit vpdpbusd per chain: 32 multiply-adds.
inline constexpr int64_t kInt8ChainsVnni256 = 12;
int32_t int8_loop_vnni256(int64_t iters);
// AVX-512 VNNI: one 512-bit vpdpbusd per chain: 64 multiply-adds.
inline constexpr int64_t kInt8ChainsVnni512 = 16;
int32_t int8_loop_vnni512(int64_t iters);

// Sum of p[0..n) as 64-bit words (n a multiple of 128, p 32-byte aligned),
// read with the matrix kernels' software prefetch.
uint64_t read_sum_avx2(const uint8_t* p, size_t n);

}  // namespace tally::probe
