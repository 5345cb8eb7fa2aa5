#include "kv/kv_storage.h"

#include <atomic>
#include <cstring>
#include <new>

#include "core/byte_size.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "kernels/kv_quant.h"

namespace tally {

namespace {
std::atomic<uint64_t> g_live_bytes{0};
std::atomic<uint64_t> g_constructed{0};
}

uint64_t KvStorage::constructed() { return g_constructed.load(); }

uint64_t KvStorage::live_bytes() { return g_live_bytes.load(); }

KvStorage::~KvStorage() { g_live_bytes -= bytes(); }

uint64_t KvStorage::planned_bytes(const KvShape& s, int64_t block_size, int64_t n_blocks, DType type) {
  if (block_size <= 0 || n_blocks <= 0) fail("KV cache needs a positive block size and block count");
  const uint64_t per_token = kv_bytes_per_token(s, type);
  const auto positions = checked_mul(static_cast<uint64_t>(block_size), static_cast<uint64_t>(n_blocks));
  const auto bytes = positions ? checked_mul(per_token, *positions) : std::nullopt;
  if (!bytes)
    fail("KV cache of {} blocks x {} positions at {} bytes per position overflows 64 bits: lower -c", n_blocks,
         block_size, per_token);
  return *bytes;
}

KvStorage::KvStorage(const KvShape& shape, int64_t block_size, int64_t n_blocks, DType type, uint64_t budget_bytes)
    : shape_(shape), block_size_(block_size), n_blocks_(n_blocks), type_(type) {
  if (!kv_cache_type_supported(type))
    fail("KV cache type {} is not supported (use f32, f16, q8_0 or q4_0)", dtype_name(type));
  if (shape.head_dim % traits(type).block_size != 0)
    fail("a {} KV cache needs a head size that is a multiple of {}, this model has {}", dtype_name(type),
         traits(type).block_size, shape.head_dim);
  // planned_bytes is overflow-checked; the products below are parts of it.
  const uint64_t planned = planned_bytes(shape, block_size, n_blocks, type);
  if (planned > budget_bytes)
    fail("KV cache for {} positions needs {}, more than the memory budget of {}: lower -c{}",
         static_cast<uint64_t>(block_size) * static_cast<uint64_t>(n_blocks), format_bytes(planned),
         format_bytes(budget_bytes),
         type == DType::F32 ? " or use --cache-type f16" : type == DType::F16 ? " or use --cache-type q8_0" : "");
  vec_bytes_ = row_bytes(type, static_cast<uint64_t>(shape.head_dim));
  block_bytes_ = static_cast<uint64_t>(shape.n_kv_head) * static_cast<uint64_t>(block_size) * vec_bytes_;
  layer_bytes_ = block_bytes_ * static_cast<uint64_t>(n_blocks);
  const uint64_t half = layer_bytes_ * static_cast<uint64_t>(shape.n_layer);
  k_.reset(new (std::nothrow) uint8_t[half]);
  v_.reset(new (std::nothrow) uint8_t[half]);
  if (!k_ || !v_) fail("cannot allocate the KV cache ({})", format_bytes(planned));
  g_live_bytes += bytes();
  ++g_constructed;
}

void KvStorage::copy_block(int64_t dst, int64_t src) {
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(k_block(l, dst), k_block(l, src), block_bytes_);
    std::memcpy(v_block(l, dst), v_block(l, src), block_bytes_);
  }
}

}  // namespace tally
