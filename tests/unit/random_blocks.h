#pragma once
// Random quantized weight rows and Q8 activations for kernel tests.
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "kernels/activation_q8.h"

namespace tally::test {

// rows x cols values of a 32-value block format (Q4_0, Q4_1, Q8_0) with random
// quants and finite fp16 scales (and mins for Q4_1), in the native GGUF layout.
inline std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& tr = traits(type);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols / 32 * tr.type_size));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
  for (size_t blk = 0; blk < out.size() / tr.type_size; ++blk) {
    const uint16_t d = f32_to_f16(scale(rng)), m = f32_to_f16(-scale(rng));
    std::memcpy(&out[blk * tr.type_size], &d, 2);
    if (type == DType::Q4_1) std::memcpy(&out[blk * tr.type_size + 2], &m, 2);
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

}  // namespace tally::test
