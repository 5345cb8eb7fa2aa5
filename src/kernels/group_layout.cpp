#include "kernels/group_layout.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

GroupGeometry geometry(DType type) {
  if (!group_supported(type)) fail("row-group layout does not serve {}", dtype_name(type));
  return group_geometry(type);
}

// Where a native 32-value block's qh word and quants start: after d (and m), qh first.
int native_qh(const GroupGeometry& g) { return g.mins ? 4 : 2; }
int native_qs(const GroupGeometry& g) { return native_qh(g) + g.qh_bytes; }

// The stored dword k of a native block's quants, and back.
uint32_t stored_dword(DType type, const uint8_t* qs, int k) {
  uint32_t v;
  std::memcpy(&v, qs + 4 * k, 4);
  return type == DType::Q8_0 ? v ^ 0x80808080u : v;
}
void native_dword(DType type, uint32_t stored, uint8_t* qs, int k) {
  const uint32_t v = type == DType::Q8_0 ? stored ^ 0x80808080u : stored;
  std::memcpy(qs + 4 * k, &v, 4);
}

const uint8_t* group_of(const WeightMatrix& w, GroupGeometry g, int64_t r) {
  return w.data + static_cast<uint64_t>(r / kGroupRows) * group_bytes(g, w.cols);
}

// A K-quant super-block of the file as integers: the 256 unsigned values
// (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63) and the per-sub-block scales.
struct SuperBlock {
  uint8_t u[256];
  uint8_t sc[16];    // Q4_K/Q5_K: scale of sub-block l at l, min at 8 + l; Q6_K: int8 scale of values 16i.. at i
  uint8_t d[2], dmin[2];
};

// Q4_K/Q5_K: d, dmin, 12 bytes of packed 6-bit scales and mins, (Q5_K: qh[32],)
// qs[128]: in chunk c of 64 values, sub-block 2c takes the low nibbles of
// qs[32c..32c+31] and bit 2c of qh[l], sub-block 2c+1 the high nibbles and bit
// 2c+1. Q6_K: ql[128], qh[64], int8 scales[16], d; in half h of 128 values,
// value 32c + l takes ql[64h + 32(c % 2) + l]'s low (c < 2) or high nibble
// and bits 2c, 2c+1 of qh[32h + l].
void unpack_super_block(DType type, const uint8_t* blk, SuperBlock& sb) {
  if (type == DType::Q6_K) {
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const int lo = blk[64 * h + 32 * (c % 2) + l] >> (c >= 2 ? 4 : 0) & 15;
          const int top = blk[128 + 32 * h + l] >> 2 * c & 3;
          sb.u[128 * h + 32 * c + l] = static_cast<uint8_t>(lo | top << 4);
        }
    std::memcpy(sb.sc, blk + 192, 16);
    std::memcpy(sb.d, blk + 208, 2);
    return;
  }
  const bool q5 = type == DType::Q5_K;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (q5 ? 48 : 16);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int b5lo = q5 ? (qh[l] >> 2 * c & 1) << 4 : 0, b5hi = q5 ? (qh[l] >> (2 * c + 1) & 1) << 4 : 0;
      sb.u[64 * c + l] = static_cast<uint8_t>((qs[32 * c + l] & 15) | b5lo);
      sb.u[64 * c + 32 + l] = static_cast<uint8_t>((qs[32 * c + l] >> 4) | b5hi);
    }
  for (int l = 0; l < 8; ++l) unpack_k_scale_min(blk + 4, l, &sb.sc[l], &sb.sc[8 + l]);
  std::memcpy(sb.d, blk, 2);
  std::memcpy(sb.dmin, blk + 2, 2);
}

// Value v (0..31) of block b of a group, row i, as stored (group_layout.h):
// Q8_0 a byte, the others 4 low bits and H / 4 high bits.
int stored_value(GroupGeometry g, const uint8_t* group, int64_t b, int i, int v) {
  if (g.qs_bytes == 32) return group[group_quant_offset(g, b, v / 4, i) + v % 4];
  const int k = v % 16 / 4, j = v % 4, half = v / 16;
  const int lo = group[group_quant_offset(g, b, k, i) + j] >> 4 * half & 15;
  if (g.qh_bytes == 0) return lo;
  if (g.qh_bytes == 4) return lo | (group[group_high_offset(g, b, i) + j] >> (2 * k + half) & 1) << 4;
  const int top = group[group_high_offset(g, b, i) + 64 * (k / 2) + j] >> (4 * (k % 2) + 2 * half) & 3;
  return lo | top << 4;
}

void repack_kquant_row(DType type, GroupGeometry g, const uint8_t* src, uint8_t* group, int i, int64_t cols) {
  SuperBlock sb;
  for (int64_t s = 0; s < cols / 256; ++s) {
    const uint8_t* blk = src + s * traits(type).type_size;
    unpack_super_block(type, blk, sb);
    std::memcpy(group + group_d_offset(g, 8 * s, i), sb.d, 2);
    if (g.mins) std::memcpy(group + group_dmin_offset(g, 8 * s, i), sb.dmin, 2);
    for (int l = 0; l < 8; ++l) {
      const int64_t b = 8 * s + l;
      const uint8_t* q = sb.u + 32 * l;
      // Q6_K: the scales of the block's halves; Q4_K/Q5_K: the sub-block's scale and min
      group[group_scale_offset(g, b, i)] = sb.sc[type == DType::Q6_K ? 2 * l : l];
      group[group_min_offset(g, b, i)] = sb.sc[type == DType::Q6_K ? 2 * l + 1 : 8 + l];
      if (type == DType::Q5_K) {
        uint32_t qh = 0;
        for (int v = 0; v < 32; ++v) qh |= static_cast<uint32_t>(q[v] >> 4 & 1) << v;
        group_high_bits_put(group + group_high_offset(g, b, i), qh);
      }
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 4; ++j) {
          const int lo = q[4 * k + j], hi = q[16 + 4 * k + j];
          group[group_quant_offset(g, b, k, i) + j] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
          if (type == DType::Q6_K)
            group[group_high_offset(g, b, i) + 64 * (k / 2) + j] |=
                static_cast<uint8_t>(((lo >> 4) | (hi >> 4) << 2) << 4 * (k % 2));
        }
    }
  }
}

}  // namespace

bool group_supported(DType type) { return group_geometry(type).qs_bytes != 0; }

uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols) {
  return static_cast<uint64_t>((rows + kGroupRows - 1) / kGroupRows) * group_bytes(geometry(type), cols);
}

uint64_t group_row_bytes(DType type, int64_t cols) { return group_bytes(geometry(type), cols) / kGroupRows; }

void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const GroupGeometry g = geometry(type);
  if (cols <= 0 || cols % g.row_values() != 0)
    fail("{} rows of {} values are not whole blocks of {}", dtype_name(type), cols, g.row_values());
  const int64_t nb = cols / 32;
  const uint64_t rb = row_bytes(type, static_cast<uint64_t>(cols)), block = native_qs(g) + g.qs_bytes;
  std::memset(dst, 0, group_matrix_bytes(type, rows, cols));  // padding rows and blocks
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* group = dst + static_cast<uint64_t>(r / kGroupRows) * group_bytes(g, cols);
    const int i = static_cast<int>(r % kGroupRows);
    if (g.kquant()) {
      repack_kquant_row(type, g, src + r * rb, group, i, cols);
      continue;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + r * rb + b * block;
      std::memcpy(group + group_scale_offset(g, b, i), blk, 2);
      if (g.mins) std::memcpy(group + group_min_offset(g, b, i), blk + 2, 2);
      if (g.qh_bytes) {
        uint32_t qh;
        std::memcpy(&qh, blk + native_qh(g), 4);
        group_high_bits_put(group + group_high_offset(g, b, i), qh);
      }
      for (int k = 0; k < g.qs_bytes / 4; ++k) {
        const uint32_t v = stored_dword(type, blk + native_qs(g), k);
        std::memcpy(group + group_quant_offset(g, b, k, i), &v, 4);
      }
    }
  }
}

// As dequantize.cpp computes each value, one rounding per operation (this
// file is built without FMA contraction), so the values are bit-identical.
void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out) {
  const GroupGeometry g = geometry(w.type);
  const uint8_t* group = group_of(w, g, r);
  const int i = static_cast<int>(r % kGroupRows);
  if (g.kquant()) {
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      const float d = load_f16(group + group_d_offset(g, b, i));
      if (w.type == DType::Q6_K) {  // (d * sc) * (q - 32)
        for (int v = 0; v < 32; ++v) {
          const auto sc = static_cast<int8_t>(group[(v < 16 ? group_scale_offset : group_min_offset)(g, b, i)]);
          out[32 * b + v] = (d * static_cast<float>(sc)) * static_cast<float>(stored_value(g, group, b, i, v) - 32);
        }
      } else {  // (d * sc) * q - dmin * mn
        const float dl = d * static_cast<float>(group[group_scale_offset(g, b, i)]);
        const float ml = load_f16(group + group_dmin_offset(g, b, i)) * static_cast<float>(group[group_min_offset(g, b, i)]);
        for (int v = 0; v < 32; ++v) {
          const float p = dl * static_cast<float>(stored_value(g, group, b, i, v));
          out[32 * b + v] = p - ml;
        }
      }
    }
    return;
  }
  uint8_t blk[4 + 4 + 32];
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    std::memcpy(blk, group + group_scale_offset(g, b, i), 2);
    if (g.mins) std::memcpy(blk + 2, group + group_min_offset(g, b, i), 2);
    if (g.qh_bytes) {
      const uint32_t qh = group_high_bits_get(group + group_high_offset(g, b, i));
      std::memcpy(blk + native_qh(g), &qh, 4);
    }
    for (int k = 0; k < g.qs_bytes / 4; ++k) {
      uint32_t v;
      std::memcpy(&v, group + group_quant_offset(g, b, k, i), 4);
      native_dword(w.type, v, blk + native_qs(g), k);
    }
    dequantize_row(w.type, blk, out + 32 * b, 32);
  }
}

void gemm_group_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  const GroupGeometry g = geometry(w.type);
  const int64_t nb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* group = group_of(w, g, r);
    const int i = static_cast<int>(r % kGroupRows);
    for (int64_t t = 0; t < x.n; ++t) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8& xb = x.blocks[t * x.token_blocks + b];
        int32_t sum[2] = {0, 0};  // of the block's halves, as stored
        for (int v = 0; v < 32; ++v) sum[v / 16] += stored_value(g, group, b, i, v) * xb.q[v];
        const int32_t* xs = x.halves_row(t) + 2 * b;
        int32_t isum = sum[0] + sum[1] - g.offset * (xs[0] + xs[1]);
        float dw = 0, mw = 0;
        if (w.type == DType::Q6_K) {
          isum = 0;
          for (int h = 0; h < 2; ++h) {
            const auto sc = static_cast<int8_t>(group[(h == 0 ? group_scale_offset : group_min_offset)(g, b, i)]);
            isum += sc * (sum[h] - g.offset * xs[h]);
          }
          dw = load_f16(group + group_d_offset(g, b, i));
        } else if (g.kquant()) {
          dw = load_f16(group + group_d_offset(g, b, i)) * static_cast<float>(group[group_scale_offset(g, b, i)]);
          mw = load_f16(group + group_dmin_offset(g, b, i)) * static_cast<float>(group[group_min_offset(g, b, i)]);
        } else {
          dw = load_f16(group + group_scale_offset(g, b, i));
          if (g.mins) mw = load_f16(group + group_min_offset(g, b, i));
        }
        acc = std::fma(static_cast<float>(isum), dw * xb.d, acc);
        if (g.mins) acc = std::fma(g.kquant() ? -mw : mw, xb.s, acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

void install_group_scalar(KernelTable& t) {
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K})
    t.set_gemm(type, gemm_group_scalar);
}

}  // namespace tally
