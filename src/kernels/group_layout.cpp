#include "kernels/group_layout.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"
#include "kernels/split_layout.h"

namespace tally {
namespace {

GroupGeometry geometry(DType type) {
  if (!group_supported(type)) fail("row-group layout does not serve {}", dtype_name(type));
  return group_geometry(type);
}

// Where a native block's quants and qh word start (after d; Q5_0: qh first).
int native_qs(const GroupGeometry& g) { return 2 + g.qh_bytes; }

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

// Q6_K: ql[128], qh[64], int8 scales[16], d (f16) per super-block of 256
// values; value v's 6-bit q (0..63) and scale sc[v / 16]. Two halves of 128:
// q of value 128h + 32c + l from ql's nibbles (c odd: bytes 32..63 of the
// half; c >= 2: high nibbles) and qh's bits 2c, 2c+1 of byte 32h + l.
constexpr int kQ6Block = 210;
void q6k_values(const uint8_t* blk, uint8_t* u) {
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int lo = blk[64 * h + 32 * (c % 2) + l] >> (c >= 2 ? 4 : 0) & 15;
        const int top = blk[128 + 32 * h + l] >> 2 * c & 3;
        u[128 * h + 32 * c + l] = static_cast<uint8_t>(lo | top << 4);
      }
}

// Q6_K block b of a group, row i: the value v's stored 6 bits.
int q6k_value(GroupGeometry g, const uint8_t* group, int64_t b, int i, int v) {
  const int k = v % 16 / 4, j = v % 4, half = v / 16;
  const int lo = group[group_quant_offset(g, b, k, i) + j] >> 4 * half & 15;
  const int top = group[group_high_offset(g, b, i) + 64 * (k / 2) + j] >> (4 * (k % 2) + 2 * half) & 3;
  return lo | top << 4;
}

void repack_q6k_row(GroupGeometry g, const uint8_t* src, uint8_t* group, int i, int64_t cols) {
  uint8_t u[256];
  for (int64_t s = 0; s < cols / 256; ++s) {
    const uint8_t* blk = src + s * kQ6Block;
    q6k_values(blk, u);
    std::memcpy(group + group_d_offset(g, 8 * s, i), blk + 208, 2);
    for (int l = 0; l < 8; ++l) {
      const int64_t b = 8 * s + l;
      const uint8_t* q = u + 32 * l;
      group[group_scale_offset(g, b, i)] = blk[192 + 2 * l];
      group[group_scale_offset(g, b, i) + 16] = blk[192 + 2 * l + 1];
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 4; ++j) {
          const int lo = q[4 * k + j], hi = q[16 + 4 * k + j];
          group[group_quant_offset(g, b, k, i) + j] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
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
  const int64_t nb = cols / 32;
  const uint64_t rb = row_bytes(type, static_cast<uint64_t>(cols)), block = 2 + g.qh_bytes + g.qs_bytes;
  if (cols <= 0 || cols % (g.sub_scales ? 256 : 32) != 0)
    fail("{} rows of {} values are not whole blocks of {}", dtype_name(type), cols, g.sub_scales ? 256 : 32);
  std::memset(dst, 0, group_matrix_bytes(type, rows, cols));  // padding rows and blocks
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* group = dst + static_cast<uint64_t>(r / kGroupRows) * group_bytes(g, cols);
    const int i = static_cast<int>(r % kGroupRows);
    if (g.sub_scales) {
      repack_q6k_row(g, src + r * rb, group, i, cols);
      continue;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + r * rb + b * block;
      std::memcpy(group + group_scale_offset(g, b, i), blk, 2);
      if (g.qh_bytes) {
        uint32_t qh;
        std::memcpy(&qh, blk + 2, 4);
        split_high_bits_put(group + group_high_offset(g, b, i), 0, qh);
      }
      for (int k = 0; k < g.qs_bytes / 4; ++k) {
        const uint32_t v = stored_dword(type, blk + native_qs(g), k);
        std::memcpy(group + group_quant_offset(g, b, k, i), &v, 4);
      }
    }
  }
}

void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out) {
  const GroupGeometry g = geometry(w.type);
  const uint8_t* group = group_of(w, g, r);
  const int i = static_cast<int>(r % kGroupRows);
  if (g.sub_scales) {  // as dequantize_block_q6_k: (d * sc) * (q - 32)
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      const float d = load_f16(group + group_d_offset(g, b, i));
      for (int v = 0; v < 32; ++v) {
        const auto sc = static_cast<int8_t>(group[group_scale_offset(g, b, i) + 16 * (v / 16)]);
        out[32 * b + v] = (d * static_cast<float>(sc)) * static_cast<float>(q6k_value(g, group, b, i, v) - 32);
      }
    }
    return;
  }
  uint8_t blk[2 + 32];
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    std::memcpy(blk, group + group_scale_offset(g, b, i), 2);
    if (g.qh_bytes) {
      const uint32_t qh = split_high_bits_get(group + group_high_offset(g, b, i), 0);
      std::memcpy(blk + 2, &qh, 4);
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
        if (g.sub_scales) {
          int32_t half[2] = {0, 0};
          for (int v = 0; v < 32; ++v) half[v / 16] += q6k_value(g, group, b, i, v) * xb.q[v];
          int32_t isum = 0;
          for (int h = 0; h < 2; ++h) {
            const auto sc = static_cast<int8_t>(group[group_scale_offset(g, b, i) + 16 * h]);
            isum += sc * (half[h] - g.offset * x.halves_row(t)[2 * b + h]);
          }
          acc = std::fma(static_cast<float>(isum), load_f16(group + group_d_offset(g, b, i)) * xb.d, acc);
          continue;
        }
        int32_t isum = -g.offset * x.sums_row(t)[b];
        const uint8_t* hb = group + group_high_offset(g, b, i);
        for (int k = 0; k < g.qs_bytes / 4; ++k) {
          const uint8_t* u = group + group_quant_offset(g, b, k, i);
          for (int j = 0; j < 4; ++j) {
            if (g.qs_bytes == 32) {
              isum += u[j] * xb.q[4 * k + j];
            } else {
              const int h = g.qh_bytes ? hb[j] >> 2 * k : 0;  // bit 0: value 4k+j's 5th, bit 1: 16+4k+j's
              isum += ((u[j] & 15) | (h & 1) << 4) * xb.q[4 * k + j] + ((u[j] >> 4) | (h & 2) << 3) * xb.q[16 + 4 * k + j];
            }
          }
        }
        const float dw = load_f16(group + group_scale_offset(g, b, i));
        acc = std::fma(static_cast<float>(isum), dw * xb.d, acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

void install_group_scalar(KernelTable& t) {
  for (DType type : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q6_K}) t.set_gemm(type, gemm_group_scalar);
}

}  // namespace tally
