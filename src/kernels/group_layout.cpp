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

// The stored dword k of a native block's quants (qs: after the f16 d), and back.
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

}  // namespace

bool group_supported(DType type) { return group_geometry(type).qs_bytes != 0; }

uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols) {
  return static_cast<uint64_t>((rows + kGroupRows - 1) / kGroupRows) * group_bytes(geometry(type), cols);
}

uint64_t group_row_bytes(DType type, int64_t cols) { return group_bytes(geometry(type), cols) / kGroupRows; }

void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const GroupGeometry g = geometry(type);
  const int64_t nb = cols / 32;
  const uint64_t rb = row_bytes(type, static_cast<uint64_t>(cols)), block = 2 + g.qs_bytes;
  std::memset(dst, 0, group_matrix_bytes(type, rows, cols));  // padding rows and blocks
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* group = dst + static_cast<uint64_t>(r / kGroupRows) * group_bytes(g, cols);
    const int i = static_cast<int>(r % kGroupRows);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + r * rb + b * block;
      std::memcpy(group + group_scale_offset(g, b, i), blk, 2);
      for (int k = 0; k < g.qs_bytes / 4; ++k) {
        const uint32_t v = stored_dword(type, blk + 2, k);
        std::memcpy(group + group_quant_offset(g, b, k, i), &v, 4);
      }
    }
  }
}

void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out) {
  const GroupGeometry g = geometry(w.type);
  const uint8_t* group = group_of(w, g, r);
  const int i = static_cast<int>(r % kGroupRows);
  uint8_t blk[2 + 32];
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    std::memcpy(blk, group + group_scale_offset(g, b, i), 2);
    for (int k = 0; k < g.qs_bytes / 4; ++k) {
      uint32_t v;
      std::memcpy(&v, group + group_quant_offset(g, b, k, i), 4);
      native_dword(w.type, v, blk + 2, k);
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
        int32_t isum = -g.offset * x.sums_row(t)[b];
        for (int k = 0; k < g.qs_bytes / 4; ++k) {
          const uint8_t* u = group + group_quant_offset(g, b, k, i);
          for (int j = 0; j < 4; ++j) {
            if (g.qs_bytes == 32) isum += u[j] * xb.q[4 * k + j];
            else isum += (u[j] & 15) * xb.q[4 * k + j] + (u[j] >> 4) * xb.q[16 + 4 * k + j];
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
  t.set_gemm(DType::Q4_0, gemm_group_scalar);
  t.set_gemm(DType::Q8_0, gemm_group_scalar);
}

}  // namespace tally
