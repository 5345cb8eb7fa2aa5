#pragma once
// Cache sizing arithmetic, exact to the byte: 2 (K and V) x layers x kv_heads
// x head_dim x bytes per number, for any model shape and cache number format.
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tally {

struct KvShape {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
};

// Bytes per cached number in `type` (block formats count their scales: Q8_0 = 34/32).
double kv_bytes_per_value(DType type);
// Bytes of K and V for one token over all layers. Exact for F32/F16/BF16; block
// formats round up to whole blocks per head vector.
uint64_t kv_bytes_per_token(const KvShape& s, DType type);
// "147456 B (144.00 KiB)"
std::string format_bytes(uint64_t bytes);

}  // namespace tally
