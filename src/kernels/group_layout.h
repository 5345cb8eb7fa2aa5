#pragma once
// The row-group layout, the one layout of every block-quantized matrix
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), regrouped at load so that
// one SIMD lane is one weight row. 16 rows form a group; for each 32-value
// block the group stores dword k of its 16 rows side by side, so a 64-byte
// load meets 16 rows and one 8-bit activation dword, broadcast, feeds all of
// them. The lanes never mix rows: each row's block sums come out in its own
// lane, with no horizontal sum and no per-block fold, and the scales of the 16
// rows load as one vector.
//   group g = rows 16g..16g+15 (rows past the matrix: zero quants and zero
//   scales, never written out), 16 * row_bytes bytes at data + g * 16 * row_bytes,
//   as records of B blocks (B = 2; K-quants: 16, two super-blocks of 8
//   sub-blocks; the blocks that complete the last record are zero); record
//   p = blocks Bp..Bp+B-1: their scales, then their high bits, then their
//   quants, then (K-quants) the two super-blocks' scales:
//     scales: S bytes per block; Q4_0/Q5_0/Q8_0 (S = 32): row i's f16 d at
//       2i; Q4_1/Q5_1 (S = 64): row i's f16 d at 2i and m at 32 + 2i;
//       Q4_K/Q5_K (S = 32): row i's 6-bit sub-block scale at i and min at 16 + i;
//       Q6_K (S = 32): row i's int8 scale of values 0..15 at i, of 16..31 at 16 + i;
//     high bits: 16 * H bytes per block, dword c of row i at 64c + 4i:
//       Q5_0, Q5_1, Q5_K (H = 4): byte j holds the 5th bit of value 4k+j at
//         bit 2k and of 16+4k+j at 2k+1 (group_high_bits_put), so one shift
//         by 2k puts dword k's bits in place for all 4 bytes;
//       Q6_K (H = 8): dword c serves quant dwords k = 2c and 2c+1: its byte j
//         holds the top 2 bits of value 4k+j at bits 4(k&1)..4(k&1)+1 and
//         of 16+4k+j at 4(k&1)+2..4(k&1)+3;
//     quants: 16 * Q bytes per block (Q = 32 for Q8_0, 16 for the others),
//       dword k (k < Q / 4) of row i at 64k + 4i:
//       all but Q8_0: the low 4 bits of values 4k..4k+3 in the low nibbles,
//         of values 16+4k..19+4k in the high nibbles, unsigned (Q4_0, Q4_1,
//         Q5_0, Q5_1: the native qs[4k..4k+3]);
//       Q8_0: values 4k..4k+3 plus 128 (the sign bit flipped), unsigned 0..255,
//         so that they are the unsigned operand of the 8-bit dot;
//     super-block scales: 32 bytes per super-block, row i's f16 d at 2i
//       (Q6_K), 64 (Q4_K, Q5_K): row i's f16 d at 2i and dmin at 32 + 2i.
//   One forward stream of whole cache lines: a record is 9 (Q4_0), 10 (Q4_1),
//   11 (Q5_0), 12 (Q5_1), 17 (Q8_0), 74 (Q4_K), 90 (Q5_K) or 105 (Q6_K)
//   lines and every plane of it starts on a line, so with the data on a line
//   (make_weight_matrix aligns it) every load is aligned, and decode streams
//   the weights at the read bandwidth.
//   row_bytes = record bytes * records / 16: the native row's when the blocks
//   fill whole records, except for Q4_K/Q5_K, whose 6-bit scales and mins take
//   a byte each (+4 bytes per super-block of 144 or 176).
// The product of row r and token t, in every kernel level and in the scalar
// twin, over blocks b in order, with u the stored unsigned values, exact
// integer sums, and xs the activations' sums (activation_pack.h):
//   Q4_0, Q5_0, Q8_0: value = d (u - o), o = 8, 16 or 128;
//     isum = sum u x - o xs(block), d_w = d;
//   Q6_K: value = d sc_h (u - 32) for half h (16 values) of the block;
//     isum = sc_0 (sum_0 u x - 32 xs(half 0)) + sc_1 (sum_1 u x - 32 xs(half 1)), d_w = d;
//   Q4_1, Q5_1: value = d u + m; isum = sum u x, d_w = d, m_w = m;
//   Q4_K, Q5_K: value = d sc u - dmin mn; isum = sum u x, d_w = d sc and
//     m_w = dmin mn (exact: 11-bit by 6-bit products);
//   acc = fma(float(isum), d_w * d_x, acc), then for the formats with mins
//   acc = fma(m_w, s_x, acc) (Q4_1, Q5_1) or fma(-m_w, s_x, acc) (Q4_K,
//   Q5_K), s_x = d_x sum x (activation_q8.h): one chain, as llama.cpp sums
//   a block's two terms (two chains added at the end moved the default model's
//   most sensitive logit further from the f32 reference); y = acc.
// (The offset taken off in float instead, as a second sum of d_w * s_x,
// cancels 128 times the activations' sum against the products' and loses
// bits a model's logits notice.) One lane per row runs exactly this sequence,
// so every level is bit-identical to the scalar twin, whatever the tile
// shape, token count or row range.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/matmul.h"

namespace tally {

inline constexpr int kGroupRows = 16;

// The geometry of a type in this layout (qs_bytes 0: not stored in it).
struct GroupGeometry {
  int qs_bytes;       // quant bytes of one row's block
  int qh_bytes;       // high-bit bytes of one row's block
  int offset;         // value = d * (u - offset) (Q6_K: times the half's scale)
  int record_blocks;  // blocks of a record
  int scale_bytes;    // a block's scale plane (16 rows)
  int super_bytes;    // a super-block's scale plane (K-quants; 0: none)
  bool mins;          // a min term: + m (Q4_1, Q5_1) or - dmin * mn (Q4_K, Q5_K)
  constexpr bool kquant() const { return super_bytes != 0; }
  constexpr int block_bytes() const { return scale_bytes + kGroupRows * (qh_bytes + qs_bytes); }
  constexpr int record_bytes() const { return record_blocks * block_bytes() + record_blocks / 8 * super_bytes; }
  constexpr int row_values() const { return kquant() ? 256 : 32; }  // rows are whole blocks of this many
};
constexpr GroupGeometry group_geometry(DType type) {
  switch (type) {
    case DType::Q4_0: return {16, 0, 8, 2, 32, 0, false};
    case DType::Q4_1: return {16, 0, 0, 2, 64, 0, true};
    case DType::Q5_0: return {16, 4, 16, 2, 32, 0, false};
    case DType::Q5_1: return {16, 4, 0, 2, 64, 0, true};
    case DType::Q8_0: return {32, 0, 128, 2, 32, 0, false};
    case DType::Q4_K: return {16, 0, 0, 16, 32, 64, true};
    case DType::Q5_K: return {16, 4, 0, 16, 32, 64, true};
    case DType::Q6_K: return {16, 8, 32, 16, 32, 32, false};
    default: return {0, 0, 0, 2, 32, 0, false};
  }
}

// Types stored in this layout: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool group_supported(DType type);
// Bytes of the stored matrix (rows rounded up to whole groups), and its row_bytes.
uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols);
uint64_t group_row_bytes(DType type, int64_t cols);
// Rewrites rows x cols values from the native layout (src) into dst
// (group_matrix_bytes).
void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols);
// Row r of a row-group matrix as floats (embedding lookups), bit-identical to
// dequantize_row on the native row.
void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out);
// The scalar twin of the SIMD kernels: y (x.n, rows) for rows [r0, r1).
void gemm_group_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);

// Bytes of a group of rows of `cols` values.
constexpr uint64_t group_bytes(GroupGeometry g, int64_t cols) {
  return static_cast<uint64_t>((cols / 32 + g.record_blocks - 1) / g.record_blocks) * g.record_bytes();
}
// Where block b's scales of row i (its d; Q6_K: its first half's scale;
// Q4_K/Q5_K: its sub-block scale), its mins (m; Q4_K/Q5_K: mn; Q6_K: its
// second half's scale), high bits and quant dword k, and its super-block's
// d and dmin lie in a group.
constexpr uint64_t group_record(GroupGeometry g, int64_t b) {
  return static_cast<uint64_t>(b / g.record_blocks * g.record_bytes());
}
constexpr uint64_t group_scale_offset(GroupGeometry g, int64_t b, int i) {
  return group_record(g, b) + static_cast<uint64_t>(b % g.record_blocks * g.scale_bytes + (g.kquant() ? i : 2 * i));
}
constexpr uint64_t group_min_offset(GroupGeometry g, int64_t b, int i) {
  return group_scale_offset(g, b, i) + (g.kquant() ? 16 : 32);
}
constexpr uint64_t group_high_offset(GroupGeometry g, int64_t b, int i) {
  return group_record(g, b) +
         static_cast<uint64_t>(g.record_blocks * g.scale_bytes + b % g.record_blocks * kGroupRows * g.qh_bytes + 4 * i);
}
constexpr uint64_t group_quant_offset(GroupGeometry g, int64_t b, int k, int i) {
  return group_record(g, b) + static_cast<uint64_t>(g.record_blocks * (g.scale_bytes + kGroupRows * g.qh_bytes) +
                                                    b % g.record_blocks * kGroupRows * g.qs_bytes + 64 * k + 4 * i);
}
constexpr uint64_t group_d_offset(GroupGeometry g, int64_t b, int i) {
  return group_record(g, b) +
         static_cast<uint64_t>(g.record_blocks * g.block_bytes() + b % g.record_blocks / 8 * g.super_bytes + 2 * i);
}
constexpr uint64_t group_dmin_offset(GroupGeometry g, int64_t b, int i) { return group_d_offset(g, b, i) + 32; }

// The 4 high-bit bytes of a row's block (Q5_0, Q5_1, Q5_K) from a GGUF qh
// word (bit v: value v's 5th bit), and back.
inline void group_high_bits_put(uint8_t* hb, uint32_t qh) {
  for (int v = 0; v < 32; ++v) {
    const int j = v % 4, k = v % 16 / 4, hi = v / 16;
    hb[j] = static_cast<uint8_t>(hb[j] | ((qh >> v) & 1) << (2 * k + hi));
  }
}
inline uint32_t group_high_bits_get(const uint8_t* hb) {
  uint32_t qh = 0;
  for (int v = 0; v < 32; ++v) {
    const int j = v % 4, k = v % 16 / 4, hi = v / 16;
    qh |= static_cast<uint32_t>((hb[j] >> (2 * k + hi)) & 1) << v;
  }
  return qh;
}

}  // namespace tally
