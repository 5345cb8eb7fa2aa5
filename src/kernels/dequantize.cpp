#include "kernels/dequantize.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/error.h"
#include "core/half.h"

namespace tally {
namespace {

// Fields are read with memcpy (load_f16 too): blocks inside a GGUF mapping
// are not aligned for their fp16/u32 members.
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The products and sums below are written in the same order as ggml's and
// gguf-py's reference code, one rounding per operation, so results match
// bit for bit (as long as the compiler does not fuse them into FMAs; the
// separate statements keep clang's default -ffp-contract=on from doing so).
inline float scale_add(float d, float q, float m) {
  const float p = d * q;
  return p + m;
}

inline float scale_sub(float d, float q, float m) {
  const float p = d * q;
  return p - m;
}

void check_blocks(DType t, uint64_t n) {
  const auto& tr = traits(t);
  if (n % tr.block_size != 0)
    fail("dequantize {}: {} values is not a multiple of the block size {}", tr.name, n,
         tr.block_size);
}

template <void (*Block)(const uint8_t*, float*)>
void rows_of_blocks(DType t, const uint8_t* src, float* dst, uint64_t n) {
  check_blocks(t, n);
  const auto& tr = traits(t);
  const uint64_t nb = n / tr.block_size;
  for (uint64_t b = 0; b < nb; ++b) Block(src + b * tr.type_size, dst + b * tr.block_size);
}

}  // namespace

void unpack_k_scale_min(const uint8_t* s, int j, uint8_t* scale, uint8_t* min) {
  // Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7;
  // bytes 4-7 the same for the mins; bytes 8-11 the low 4 bits of scale and
  // min 4-7 (scale in the low nibble).
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *min = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q8_0: d (f16), qs[32] (int8).
void dequantize_block_q8_0(const uint8_t* block, float* out32) {
  const float d = load_f16(block);
  const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (int i = 0; i < 32; ++i) out32[i] = (float)qs[i] * d;
}

// Q4_0: d, qs[16]; value j in the low nibble of qs[j], value j+16 in the high.
void dequantize_block_q4_0(const uint8_t* block, float* out32) {
  const float d = load_f16(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    out32[j] = (float)((qs[j] & 15) - 8) * d;
    out32[j + 16] = (float)((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: d, m, qs[16].
void dequantize_block_q4_1(const uint8_t* block, float* out32) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const uint8_t* qs = block + 4;
  for (int j = 0; j < 16; ++j) {
    out32[j] = scale_add(d, (float)(qs[j] & 15), m);
    out32[j + 16] = scale_add(d, (float)(qs[j] >> 4), m);
  }
}

// Q5_0: d, qh (u32, bit i = 5th bit of value i), qs[16].
void dequantize_block_q5_0(const uint8_t* block, float* out32) {
  const float d = load_f16(block);
  const uint32_t qh = load_u32(block + 2);
  const uint8_t* qs = block + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    out32[j] = (float)(lo - 16) * d;
    out32[j + 16] = (float)(hi - 16) * d;
  }
}

// Q5_1: d, m, qh (u32), qs[16].
void dequantize_block_q5_1(const uint8_t* block, float* out32) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const uint32_t qh = load_u32(block + 4);
  const uint8_t* qs = block + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    out32[j] = scale_add(d, (float)lo, m);
    out32[j + 16] = scale_add(d, (float)hi, m);
  }
}

// Q4_K: d, dmin, scales[12], qs[128]. Four chunks of 64 values; chunk c reads
// qs[32c .. 32c+31]: low nibbles are sub-block 2c, high nibbles 2c+1.
void dequantize_block_q4_k(const uint8_t* block, float* out256) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qs = block + 16;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc0, m0, sc1, m1;
    unpack_k_scale_min(scales, 2 * c, &sc0, &m0);
    unpack_k_scale_min(scales, 2 * c + 1, &sc1, &m1);
    const float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
    const float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
    const uint8_t* q = qs + 32 * c;
    float* y = out256 + 64 * c;
    for (int l = 0; l < 32; ++l) {
      y[l] = scale_sub(d0, (float)(q[l] & 15), dm0);
      y[l + 32] = scale_sub(d1, (float)(q[l] >> 4), dm1);
    }
  }
}

// Q5_K: as Q4_K plus qh[32]: bit j of qh[l] is the 5th bit of value l of
// sub-block j.
void dequantize_block_q5_k(const uint8_t* block, float* out256) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* qs = block + 48;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc0, m0, sc1, m1;
    unpack_k_scale_min(scales, 2 * c, &sc0, &m0);
    unpack_k_scale_min(scales, 2 * c + 1, &sc1, &m1);
    const float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
    const float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
    const uint8_t* q = qs + 32 * c;
    float* y = out256 + 64 * c;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 15) | ((qh[l] >> (2 * c)) & 1) << 4;
      const int hi = (q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
      y[l] = scale_sub(d0, (float)lo, dm0);
      y[l + 32] = scale_sub(d1, (float)hi, dm1);
    }
  }
}

// Q6_K: ql[128], qh[64], int8 scales[16], d (f16, last). Two halves of 128
// values; in a half, group g (32 values) takes the low (g < 2) or high
// nibble of ql[l + 32*(g&1)] and bits 2g..2g+1 of qh[l]; scale per 16 values.
void dequantize_block_q6_k(const uint8_t* block, float* out256) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* l4 = ql + 64 * h;
    const uint8_t* h2 = qh + 32 * h;
    const int8_t* s = sc + 8 * h;
    float* y = out256 + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = ((l4[l] & 15) | ((h2[l] >> 0) & 3) << 4) - 32;
      const int q1 = ((l4[l + 32] & 15) | ((h2[l] >> 2) & 3) << 4) - 32;
      const int q2 = ((l4[l] >> 4) | ((h2[l] >> 4) & 3) << 4) - 32;
      const int q3 = ((l4[l + 32] >> 4) | ((h2[l] >> 6) & 3) << 4) - 32;
      const int is = l / 16;  // which 16-value scale inside each group
      y[l] = (d * (float)s[is + 0]) * (float)q0;
      y[l + 32] = (d * (float)s[is + 2]) * (float)q1;
      y[l + 64] = (d * (float)s[is + 4]) * (float)q2;
      y[l + 96] = (d * (float)s[is + 6]) * (float)q3;
    }
  }
}

void dequantize_row_f32(const uint8_t* src, float* dst, uint64_t n) {
  if (n) std::memcpy(dst, src, n * 4);
}

void dequantize_row_f16(const uint8_t* src, float* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
}

void dequantize_row_bf16(const uint8_t* src, float* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_f32(h);
  }
}

void dequantize_row_q8_0(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q8_0>(DType::Q8_0, src, dst, n);
}
void dequantize_row_q4_0(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q4_0>(DType::Q4_0, src, dst, n);
}
void dequantize_row_q4_1(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q4_1>(DType::Q4_1, src, dst, n);
}
void dequantize_row_q5_0(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q5_0>(DType::Q5_0, src, dst, n);
}
void dequantize_row_q5_1(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q5_1>(DType::Q5_1, src, dst, n);
}
void dequantize_row_q4_k(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q4_k>(DType::Q4_K, src, dst, n);
}
void dequantize_row_q5_k(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q5_k>(DType::Q5_K, src, dst, n);
}
void dequantize_row_q6_k(const uint8_t* src, float* dst, uint64_t n) {
  rows_of_blocks<dequantize_block_q6_k>(DType::Q6_K, src, dst, n);
}

namespace {

// NaN and infinities are the bit patterns whose exponent is all ones.
constexpr uint32_t kF32Exponent = 0x7f800000;
constexpr uint16_t kF16Exponent = 0x7c00;
constexpr uint16_t kBf16Exponent = 0x7f80;

// The first of n elements of type U at `p` whose bits under `mask` are all
// set, or -1. Chunks are tested without branches (the loop vectorizes), and
// only a chunk that holds one is searched.
template <class U>
int64_t first_all_ones(const uint8_t* p, uint64_t n, U mask) {
  constexpr uint64_t kChunk = 2048;
  auto at = [p](uint64_t i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof(U));
    return x;
  };
  for (uint64_t c = 0; c < n; c += kChunk) {
    const uint64_t e = std::min(n, c + kChunk);
    U hit = 0;
    for (uint64_t i = c; i < e; ++i) hit |= static_cast<U>((at(i) & mask) == mask);
    if (hit)
      for (uint64_t i = c; i < e; ++i)
        if ((at(i) & mask) == mask) return static_cast<int64_t>(i);
  }
  return -1;
}

// Blocks whose values are finite exactly when their f16 scales at `offsets`
// are: the first value of the first block with a scale that is not, or -1.
int64_t first_bad_block(DType t, const uint8_t* src, uint64_t n, std::initializer_list<uint32_t> offsets) {
  check_blocks(t, n);
  const auto& tr = traits(t);
  const uint64_t nb = n / tr.block_size;
  for (uint64_t b = 0; b < nb; ++b) {
    uint16_t hit = 0;
    for (const uint32_t off : offsets) {
      uint16_t h;
      std::memcpy(&h, src + b * tr.type_size + off, 2);
      hit |= static_cast<uint16_t>((h & kF16Exponent) == kF16Exponent);
    }
    if (hit) return static_cast<int64_t>(b * tr.block_size);
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(DType type, const uint8_t* src, uint64_t n) {
  switch (type) {
    case DType::F32: return first_all_ones<uint32_t>(src, n, kF32Exponent);
    case DType::F16: return first_all_ones<uint16_t>(src, n, kF16Exponent);
    case DType::BF16: return first_all_ones<uint16_t>(src, n, kBf16Exponent);
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: return first_bad_block(type, src, n, {0});  // d first
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return first_bad_block(type, src, n, {0, 2});  // d, then m or dmin
    case DType::Q6_K: return first_bad_block(type, src, n, {208});   // d last
    default: break;
  }
  fail("dequantize: tensor type {} (id {}) is not supported", dtype_name(type), static_cast<uint32_t>(type));
}

void dequantize_row(DType type, const uint8_t* src, float* dst, uint64_t n) {
  switch (type) {
    case DType::F32: return dequantize_row_f32(src, dst, n);
    case DType::F16: return dequantize_row_f16(src, dst, n);
    case DType::BF16: return dequantize_row_bf16(src, dst, n);
    case DType::Q8_0: return dequantize_row_q8_0(src, dst, n);
    case DType::Q4_0: return dequantize_row_q4_0(src, dst, n);
    case DType::Q4_1: return dequantize_row_q4_1(src, dst, n);
    case DType::Q5_0: return dequantize_row_q5_0(src, dst, n);
    case DType::Q5_1: return dequantize_row_q5_1(src, dst, n);
    case DType::Q4_K: return dequantize_row_q4_k(src, dst, n);
    case DType::Q5_K: return dequantize_row_q5_k(src, dst, n);
    case DType::Q6_K: return dequantize_row_q6_k(src, dst, n);
    default: break;
  }
  fail("dequantize: tensor type {} (id {}) is not supported", dtype_name(type),
       static_cast<uint32_t>(type));
}

}  // namespace tally
