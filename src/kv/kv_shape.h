#pragma once
// What one position of a KV cache holds: for every layer, K and V vectors of
// head_dim numbers per kv head. Sizes are exact to the byte and every product
// is overflow-checked; a non-positive shape throws tally::Error.
#include <cstdint>

#include "core/dtype.h"

namespace tally {

struct KvShape {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
};

// Bytes per cached number in `type` (block formats count their scales: Q8_0 = 34/32).
double kv_bytes_per_value(DType type);
// Bytes of K and V for one token over all layers: 2 x layers x kv_heads x
// head_dim x bytes per number. Exact for F32/F16/BF16; block formats round up
// to whole blocks per head vector.
uint64_t kv_bytes_per_token(const KvShape& s, DType type);

}  // namespace tally
