#include "kv/kv_shape.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace tally {
namespace {

uint64_t mul_or_fail(uint64_t a, uint64_t b) {
  auto r = checked_mul(a, b);
  if (!r) fail("cache bytes per token overflow 64 bits ({} x {})", a, b);
  return *r;
}

}  // namespace

double kv_bytes_per_value(DType type) {
  const auto& t = traits(type);
  return static_cast<double>(t.type_size) / t.block_size;
}

uint64_t kv_bytes_per_token(const KvShape& s, DType type) {
  if (s.n_layer <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0)
    fail("cache shape must be positive (layers {}, kv heads {}, head_dim {})", s.n_layer, s.n_kv_head, s.head_dim);
  const auto& t = traits(type);
  const uint64_t blocks_per_vec = (static_cast<uint64_t>(s.head_dim) + t.block_size - 1) / t.block_size;
  uint64_t b = mul_or_fail(2ull * static_cast<uint64_t>(s.n_layer), static_cast<uint64_t>(s.n_kv_head));
  b = mul_or_fail(b, blocks_per_vec);
  return mul_or_fail(b, t.type_size);
}

}  // namespace tally
