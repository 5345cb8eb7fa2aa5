#pragma once
// Activations quantized to 8 bits per 32-value block, the form every
// matrix-vector product consumes: value[i] ~= d * q[i]; s = d * sum(q) lets
// weight formats with an offset (Q4_1, Q5_1) add m * sum(x) in one step.
#include <cstdint>

namespace tally {

struct BlockQ8 {
  float d;
  float s;
  int8_t q[32];
};
static_assert(sizeof(BlockQ8) == 40);

// x has n values (n % 32 == 0); out has n / 32 blocks. The kernel of the
// current level (kernel_table.h), bit-identical to the scalar reference.
void quantize_row_q8(const float* x, BlockQ8* out, int64_t n);
void quantize_row_q8_scalar(const float* x, BlockQ8* out, int64_t n);

}  // namespace tally
