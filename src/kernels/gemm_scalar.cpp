// The scalar matrix products of the weight formats that have no split
// layout (split_layout.h): one dot product per (row, token), dequantizing
// block by block (weights are never expanded). The 32-value formats keep
// integer block sums; the others dequantize a block to float and multiply by
// d * q of the activations. These are the only products of these formats
// until a level adds its own (kernel_table.h).
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

// 32-value formats: integer sum per block, one float multiply-add per block.
// Q(b, i) is the weight's integer value i of block b (offset already removed
// for the symmetric formats).
template <int kBytes, bool kHasMin, typename UnpackFn>
float dot_blocks32(const uint8_t* w, const BlockQ8* x, int64_t n, UnpackFn unpack) {
  float acc = 0;
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = w + b * kBytes;
    unpack(blk, q);
    int32_t isum = 0;
    for (int i = 0; i < 32; ++i) isum += q[i] * x[b].q[i];
    acc += load_f16(blk) * x[b].d * static_cast<float>(isum);
    if constexpr (kHasMin) acc += load_f16(blk + 2) * x[b].s;
  }
  return acc;
}

// Any other supported type: dequantize a block to float, dot with d * q.
float dot_dequantized(DType type, const uint8_t* w, const BlockQ8* x, int64_t n) {
  const auto& tr = traits(type);
  const uint32_t step = std::max<uint32_t>(tr.block_size, 32);  // plain types: one activation block at a time
  float buf[256];
  float acc = 0;
  for (int64_t v = 0; v < n; v += step) {
    dequantize_row(type, w + v / tr.block_size * tr.type_size, buf, step);
    for (uint32_t i = 0; i < step; i += 32) {
      const BlockQ8& xb = x[(v + i) / 32];
      float s = 0;
      for (int k = 0; k < 32; ++k) s += buf[i + k] * xb.q[k];
      acc += s * xb.d;
    }
  }
  return acc;
}

template <DType T>
float dot_dequantized_t(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_dequantized(T, w, x, n);
}

float dot_q5_0(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<22, false>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((blk[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16);
      q[j + 16] = static_cast<int8_t>(((blk[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
  });
}

float dot_q5_1(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<24, true>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>((blk[8 + j] & 15) | ((qh >> j) & 1) << 4);
      q[j + 16] = static_cast<int8_t>((blk[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
  });
}

// Rows [r0, r1) of w times the tokens of x, one dot per (row, token).
template <float (*kDot)(const uint8_t*, const BlockQ8*, int64_t)>
void gemm_rows(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  const int64_t xb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.n; ++t) y[t * w.rows + r] = kDot(w.row(r), x.blocks + t * xb, w.cols);
}

}  // namespace

void install_row_dot_scalar(KernelTable& t) {
  t.set_gemm(DType::Q5_0, gemm_rows<dot_q5_0>);
  t.set_gemm(DType::Q5_1, gemm_rows<dot_q5_1>);
  t.set_gemm(DType::F32, gemm_rows<dot_dequantized_t<DType::F32>>);
  t.set_gemm(DType::F16, gemm_rows<dot_dequantized_t<DType::F16>>);
  t.set_gemm(DType::BF16, gemm_rows<dot_dequantized_t<DType::BF16>>);
  t.set_gemm(DType::Q4_K, gemm_rows<dot_dequantized_t<DType::Q4_K>>);
  t.set_gemm(DType::Q5_K, gemm_rows<dot_dequantized_t<DType::Q5_K>>);
  t.set_gemm(DType::Q6_K, gemm_rows<dot_dequantized_t<DType::Q6_K>>);
}

}  // namespace tally
