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

uint64_t KvStorage::planned_bytes(const KvShape& s, int64_t block_size, int64_t n_blocks, DType type,
                                  int64_t n_window_layers, int64_t n_window_blocks) {
  if (block_size <= 0 || n_blocks <= 0) fail("KV cache needs a positive block size and block count");
  if (n_window_layers < 0 || n_window_layers > s.n_layer || n_window_blocks < 0 || n_window_blocks > n_blocks)
    fail("KV cache with {} window layers of {} and {} window blocks of {}", n_window_layers, s.n_layer,
         n_window_blocks, n_blocks);
  const uint64_t per_token = kv_bytes_per_token(s, type);
  const uint64_t per_layer = per_token / static_cast<uint64_t>(s.n_layer);  // exact: a sum of equal layers
  // Layer-blocks held: every full layer's n_blocks, every window layer's n_window_blocks.
  const auto full = checked_mul(static_cast<uint64_t>(s.n_layer - n_window_layers), static_cast<uint64_t>(n_blocks));
  const auto window =
      checked_mul(static_cast<uint64_t>(n_window_layers), static_cast<uint64_t>(n_window_blocks));
  const auto layer_blocks = full && window ? checked_add(*full, *window) : std::nullopt;
  const auto positions = layer_blocks ? checked_mul(static_cast<uint64_t>(block_size), *layer_blocks) : std::nullopt;
  const auto bytes = positions ? checked_mul(per_layer, *positions) : std::nullopt;
  if (!bytes)
    fail("KV cache of {} blocks x {} positions at {} bytes per position overflows 64 bits: lower the context", n_blocks,
         block_size, per_token);
  return *bytes;
}

KvStorage::KvStorage(const KvShape& shape, int64_t block_size, int64_t n_blocks, DType type, uint64_t budget_bytes,
                     const std::vector<bool>& window_layers, int64_t n_window_blocks)
    : shape_(shape), block_size_(block_size), n_blocks_(n_blocks), window_layers_(window_layers), type_(type) {
  if (!window_layers.empty() && static_cast<int64_t>(window_layers.size()) != shape.n_layer)
    fail("KV cache: {} window-layer flags for {} layers", window_layers.size(), shape.n_layer);
  for (bool w : window_layers) n_window_layers_ += w;
  n_window_blocks_ = n_window_layers_ > 0 ? n_window_blocks : 0;
  if (!kv_cache_type_supported(type))
    fail("KV cache type {} is not supported (use f32, f16, q8_0 or q4_0)", dtype_name(type));
  if (shape.head_dim % traits(type).block_size != 0)
    fail("a {} KV cache needs a head size that is a multiple of {}, this model has {}", dtype_name(type),
         traits(type).block_size, shape.head_dim);
  // planned_bytes is overflow-checked; the products below are parts of it.
  const uint64_t planned = planned_bytes(shape, block_size, n_blocks, type, n_window_layers_, n_window_blocks_);
  if (planned > budget_bytes)
    fail("KV cache for {} positions needs {}, more than the memory budget of {}: lower the context{}",
         static_cast<uint64_t>(block_size) * static_cast<uint64_t>(n_blocks), format_bytes(planned),
         format_bytes(budget_bytes),
         type == DType::F32 ? " or use an f16 cache" : type == DType::F16 ? " or use a q8_0 cache" : "");
  vec_bytes_ = row_bytes(type, static_cast<uint64_t>(shape.head_dim));
  block_bytes_ = static_cast<uint64_t>(shape.n_kv_head) * static_cast<uint64_t>(block_size) * vec_bytes_;
  half_bytes_ = 0;
  for (int64_t l = 0; l < shape.n_layer; ++l) {
    layer_offset_.push_back(half_bytes_);
    half_bytes_ += block_bytes_ * static_cast<uint64_t>(window_layer(l) ? n_window_blocks_ : n_blocks);
  }
  k_ = line_bytes(half_bytes_);
  v_ = line_bytes(half_bytes_);
  if (!k_ || !v_) fail("cannot allocate the KV cache ({})", format_bytes(planned));
  g_live_bytes += bytes();
  ++g_constructed;
}

uint64_t KvStorage::copy_layers(bool window, int64_t dst, int64_t src) {
  uint64_t copied = 0;
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    if (window_layer(l) != window) continue;
    std::memcpy(k_block(l, dst), k_block(l, src), block_bytes_);
    std::memcpy(v_block(l, dst), v_block(l, src), block_bytes_);
    copied += 2 * block_bytes_;
  }
  return copied;
}

uint64_t KvStorage::copy_block(int64_t dst, int64_t src) { return copy_layers(false, dst, src); }

void KvStorage::store(int64_t layer, int64_t block, int64_t row, const float* k, const float* v) {
  const int64_t hd = shape_.head_dim;
  for (int64_t h = 0; h < shape_.n_kv_head; ++h) {
    const uint64_t off = row_offset(h, row);
    kv_store_row(type_, k + h * hd, k_block(layer, block) + off, hd);
    kv_store_row(type_, v + h * hd, v_block(layer, block) + off, hd);
  }
}

void KvStorage::load(int64_t layer, int64_t block, int64_t row, float* k, float* v) const {
  const int64_t hd = shape_.head_dim;
  for (int64_t h = 0; h < shape_.n_kv_head; ++h) {
    const uint64_t off = row_offset(h, row);
    kv_load_row(type_, k_block(layer, block) + off, k + h * hd, hd);
    kv_load_row(type_, v_block(layer, block) + off, v + h * hd, hd);
  }
}

void KvStorage::store_raw(int64_t layer, int64_t block, int64_t row, const uint8_t* k, const uint8_t* v) {
  for (int64_t h = 0; h < shape_.n_kv_head; ++h) {
    const uint64_t off = row_offset(h, row), at = static_cast<uint64_t>(h) * vec_bytes_;
    if (k) std::memcpy(k_block(layer, block) + off, k + at, vec_bytes_);
    std::memcpy(v_block(layer, block) + off, v + at, vec_bytes_);
  }
}

void KvStorage::load_raw(int64_t layer, int64_t block, int64_t row, uint8_t* k, uint8_t* v) const {
  for (int64_t h = 0; h < shape_.n_kv_head; ++h) {
    const uint64_t off = row_offset(h, row), at = static_cast<uint64_t>(h) * vec_bytes_;
    std::memcpy(k + at, k_block(layer, block) + off, vec_bytes_);
    std::memcpy(v + at, v_block(layer, block) + off, vec_bytes_);
  }
}

uint64_t KvStorage::copy_window_block(int64_t dst, int64_t src) { return copy_layers(true, dst, src); }

}  // namespace tally
