#pragma once
// The split row layout: the bytes of a GGUF row of Q4_1/Q5_1
// blocks, regrouped so that SIMD kernels load scales 8 blocks at a time and
// the integer sums of 8 blocks come out one block per lane, with no reduction:
//   row = quants of all nb blocks (16 bytes each) |
//         high bits of all blocks (4 bytes each, Q5_1 only) |
//         d of all blocks (f16) | m of all blocks (f16, Q4_1/Q5_1 only);
//   nb = the row's blocks rounded up to even (split_blocks): an odd row gets
//   one padding block of zero quants and zero scales, which adds exactly 0.
//   quants: the blocks form runs of 8 (as many as fit), then one of 4 and one
//   of 2 as what is left needs. A run of width W stores dword k
//   (bytes 4k..4k+3) of its blocks 0..W-1 side by side, k = 0, 1, ..., so a
//   32-byte load meets 8, 4 or 2 blocks, lane l belonging to block l % W.
//   A dword holds (the low 4 bits of) values 4k..4k+3 in its low nibbles and
//   16+4k..19+4k in its high ones; of the 8-bit activations
//   (activation_pack.h), values 4k..4k+3.
//   high bits (Q5): a run of W blocks starting at block b0 has 4W bytes at
//   4 * b0; byte 4l + j holds in bit 2k the 5th bit of value 4k+j of its block
//   l, and in bit 2k+1 that of value 16+4k+j (k = 0..3). Byte p of a run's
//   32-byte quant load i thus finds its two bits in byte p % 4W, at 2k and
//   2k+1 with k = (32i + p) / 4W: the 4W bytes broadcast over the load
//   (split_high_bits_*).
// Same size as the native row when nb is even, so repacking at load costs no
// memory beyond the copy (the mapped source pages are released afterwards).
// This is the one layout of these formats: every kernel level and the scalar
// reference read it. The K-quants reuse its quant order and high bits
// (kquant_layout.h).
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/matmul.h"

namespace tally {

// Blocks of a split row of `cols` values: cols / 32 rounded up to even.
inline int64_t split_blocks(int64_t cols) { return (cols / 32 + 1) / 2 * 2; }

// The run holding block b of a row of nb blocks (nb even): its first block and width.
struct SplitRun {
  int64_t start;
  int width;
};
inline SplitRun split_run(int64_t nb, int64_t b) {
  const int64_t full = nb / 8 * 8;
  if (b < full) return {b / 8 * 8, 8};
  if (nb - full >= 4 && b < full + 4) return {full, 4};
  return {nb - 2, 2};
}
// Calls f(std::integral_constant<int, W>{}, b0) for each run, in block order
// (W a constant, so kernels specialize on it).
template <class F>
__attribute__((always_inline)) inline void for_each_split_run(int64_t nb, F&& f) {
  int64_t b0 = 0;
  for (; b0 + 8 <= nb; b0 += 8) f(std::integral_constant<int, 8>{}, b0);
  if (nb - b0 >= 4) f(std::integral_constant<int, 4>{}, b0), b0 += 4;
  if (nb - b0 == 2) f(std::integral_constant<int, 2>{}, b0);
}
// Byte offset of dword k of block b in the quants of a row whose blocks have
// `block_bytes` quant bytes (16 for Q4 and Q5, 32 for the 8-bit activations).
inline int64_t split_dword_offset(int64_t nb, int block_bytes, int64_t b, int k) {
  const SplitRun r = split_run(nb, b);
  return r.start * block_bytes + (k * r.width + (b - r.start)) * 4;
}

// The 4W high-bit bytes of a run (`hb`, at 4 * its first block): block l's
// 5th bits as a GGUF qh word (bit v = value v) in and out.
inline void split_high_bits_put(uint8_t* hb, int l, uint32_t qh) {
  for (int v = 0; v < 32; ++v) {
    const int j = v % 4, k = v % 16 / 4, hi = v / 16;
    hb[4 * l + j] = static_cast<uint8_t>(hb[4 * l + j] | ((qh >> v) & 1) << (2 * k + hi));
  }
}
inline uint32_t split_high_bits_get(const uint8_t* hb, int l) {
  uint32_t qh = 0;
  for (int v = 0; v < 32; ++v) {
    const int j = v % 4, k = v % 16 / 4, hi = v / 16;
    qh |= static_cast<uint32_t>((hb[4 * l + j] >> (2 * k + hi)) & 1) << v;
  }
  return qh;
}

// Types stored in the split layout: Q4_1, Q5_1.
bool split_supported(DType type);
// Bytes of one split row of `cols` values (cols % 32 == 0).
uint64_t split_row_bytes(DType type, int64_t cols);
// Rewrites rows x cols values from the native layout (src) into dst
// (rows x split_row_bytes).
void repack_split(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols);
// The native quant bytes of block b of a split row (16 bytes into out;
// for Q5, the low 4 bits of the values).
void split_block_quants(DType type, const uint8_t* row, int64_t nb, int64_t b, uint8_t* out);
// The native qh word of block b of a split Q5_1 row.
uint32_t split_block_high_bits(DType type, const uint8_t* row, int64_t nb, int64_t b);
// Row r of a split matrix as floats (embedding lookups).
void dequantize_split_row(const WeightMatrix& w, int64_t r, float* out);
// The scalar reference product for a split matrix (the KernelTable entry of
// the scalar level): y (x.n, rows) for rows [r0, r1), from x.blocks.
void gemm_split_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);

}  // namespace tally
