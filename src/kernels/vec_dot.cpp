#include "kernels/vec_dot.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu_features.h"
#include "kernels/dequantize.h"

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

}  // namespace

float vec_dot_q4_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<18, false>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>((blk[2 + j] & 15) - 8);
      q[j + 16] = static_cast<int8_t>((blk[2 + j] >> 4) - 8);
    }
  });
}

float vec_dot_q4_1_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<20, true>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(blk[4 + j] & 15);
      q[j + 16] = static_cast<int8_t>(blk[4 + j] >> 4);
    }
  });
}

float vec_dot_q5_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<22, false>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((blk[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16);
      q[j + 16] = static_cast<int8_t>(((blk[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
  });
}

float vec_dot_q5_1_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<24, true>(w, x, n, [](const uint8_t* blk, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>((blk[8 + j] & 15) | ((qh >> j) & 1) << 4);
      q[j + 16] = static_cast<int8_t>((blk[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
  });
}

float vec_dot_q8_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n) {
  return dot_blocks32<34, false>(w, x, n, [](const uint8_t* blk, int8_t* q) { std::memcpy(q, blk + 2, 32); });
}

VecDotFn vec_dot_fn_scalar(DType type) {
  switch (type) {
    case DType::Q4_0: return vec_dot_q4_0_q8_scalar;
    case DType::Q4_1: return vec_dot_q4_1_q8_scalar;
    case DType::Q5_0: return vec_dot_q5_0_q8_scalar;
    case DType::Q5_1: return vec_dot_q5_1_q8_scalar;
    case DType::Q8_0: return vec_dot_q8_0_q8_scalar;
    case DType::F32: return dot_dequantized_t<DType::F32>;
    case DType::F16: return dot_dequantized_t<DType::F16>;
    case DType::BF16: return dot_dequantized_t<DType::BF16>;
    case DType::Q4_K: return dot_dequantized_t<DType::Q4_K>;
    case DType::Q5_K: return dot_dequantized_t<DType::Q5_K>;
    case DType::Q6_K: return dot_dequantized_t<DType::Q6_K>;
    default:
      fail("no matrix kernel for tensor type {} (id {})", dtype_name(type), static_cast<uint32_t>(type));
  }
}

VecDotFn vec_dot_fn(DType type) {
  if (simd_at_least(SimdLevel::Avx2)) {
    switch (type) {
      case DType::Q4_0: return vec_dot_q4_0_q8_avx2;
      case DType::Q4_1: return vec_dot_q4_1_q8_avx2;
      case DType::Q8_0: return vec_dot_q8_0_q8_avx2;
      default: break;
    }
  }
  return vec_dot_fn_scalar(type);
}

}  // namespace tally
