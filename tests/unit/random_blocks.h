#pragma once
// Random and extreme quantized weight rows and Q8 activations for kernel tests.
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "kernels/activation_q8.h"

namespace tally::test {

// Byte offsets of a block's f16 scale (d) and, where it has one, its f16 min
// (m, dmin); -1: none.
struct F16Fields {
  int d, m;
};
inline F16Fields f16_fields_of(DType type) {
  switch (type) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208, -1};
    default: return {0, -1};  // Q4_0, Q5_0, Q8_0
  }
}

inline void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// rows x cols values of a quantized format (32- or 256-value blocks) with
// random quants, scales and mins, and finite fp16 fields, in the native GGUF
// layout.
inline std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& tr = traits(type);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols / tr.block_size * tr.type_size));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
  const F16Fields f = f16_fields_of(type);
  const bool k = tr.block_size == 256;  // K-quant mins are subtracted: dmin > 0
  for (size_t blk = 0; blk < out.size() / tr.type_size; ++blk) {
    put_half(&out[blk * tr.type_size + f.d], scale(rng));
    if (f.m >= 0) put_half(&out[blk * tr.type_size + f.m], k ? scale(rng) : -scale(rng));
  }
  return out;
}

// rows x cols values at the largest magnitudes a format holds: every quant at
// the top of its unsigned range (Q4 15, Q5 31, Q6_K 63, Q8_0 127: 255 once
// the row-group layout flips its sign bit),
// the largest K sub-block scales and mins (63; Q6_K -128), so that the
// kernels' integer sums reach their bounds.
inline std::vector<uint8_t> extreme_rows(DType type, int64_t rows, int64_t cols) {
  const auto& tr = traits(type);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols / tr.block_size * tr.type_size),
                           type == DType::Q8_0 ? 0x7F : 0xFF);
  const F16Fields f = f16_fields_of(type);
  for (size_t blk = 0; blk < out.size() / tr.type_size; ++blk) {
    uint8_t* b = &out[blk * tr.type_size];
    if (type == DType::Q6_K) std::memset(b + 192, 0x80, 16);
    put_half(b + f.d, 0.01f);
    if (f.m >= 0) put_half(b + f.m, 0.02f);
  }
  return out;
}

// tokens x cols normal activations quantized to Q8 blocks.
inline std::vector<BlockQ8> random_activations(int64_t tokens, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(tokens * cols);
  for (auto& v : x) v = g(rng);
  std::vector<BlockQ8> q(tokens * cols / 32);
  quantize_row_q8_scalar(x.data(), q.data(), tokens * cols);
  return q;
}

// tokens x cols activations of magnitude 127 in every block: token t's values
// are all +1 (t % 3 == 0), all -1 (t % 3 == 1) or alternate in sign.
inline std::vector<BlockQ8> extreme_activations(int64_t tokens, int64_t cols) {
  std::vector<float> x(tokens * cols);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < cols; ++i) x[t * cols + i] = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : (i % 2 ? 1.0f : -1.0f);
  std::vector<BlockQ8> q(tokens * cols / 32);
  quantize_row_q8_scalar(x.data(), q.data(), tokens * cols);
  return q;
}

}  // namespace tally::test
