#pragma once
// The cache's memory: a pool of fixed-size blocks allocated once, holding K
// and V for every layer. It knows nothing of sequences (see KvCache for that).
//
//   k_, v_: per layer (n_blocks(layer), n_kv_head, block_size, head_dim) in `type`
//
// (for Q8_0 / Q4_0 a head vector is head_dim / 32 GGUF blocks, each an f16
// scale and its values: row_bytes(type, head_dim)), so one block of one layer
// keeps each kv head's positions contiguous: the attention kernel streams a
// head's keys block by block.
//
// Sliding-window layers (window_layers) attend to the last positions only, so
// they get a pool of their own, of n_window_blocks blocks (at most n_blocks):
// block ids of those layers name window slots, not the full layers' blocks.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/line_aligned.h"
#include "kv/kv_shape.h"

namespace tally {

class KvStorage {
 public:
  // type: F32, F16, Q8_0 or Q4_0 (the block formats need head_dim % 32 == 0).
  // window_layers: empty, or one flag per layer (true: n_window_blocks blocks).
  // Throws if the pool would exceed `budget_bytes`, naming the planned bytes.
  KvStorage(const KvShape& shape, int64_t block_size, int64_t n_blocks, DType type, uint64_t budget_bytes,
            const std::vector<bool>& window_layers = {}, int64_t n_window_blocks = 0);

  const KvShape& shape() const { return shape_; }
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_window_blocks() const { return n_window_blocks_; }
  bool window_layer(int64_t layer) const { return !window_layers_.empty() && window_layers_[layer]; }
  int64_t n_window_layers() const { return n_window_layers_; }
  DType type() const { return type_; }
  uint64_t bytes() const { return 2 * half_bytes_; }
  static uint64_t planned_bytes(const KvShape& shape, int64_t block_size, int64_t n_blocks, DType type,
                                int64_t n_window_layers = 0, int64_t n_window_blocks = 0);

  // Start of (n_kv_head, block_size, head_dim) for one layer's block.
  uint8_t* k_block(int64_t layer, int64_t block) { return k_.get() + offset(layer, block); }
  uint8_t* v_block(int64_t layer, int64_t block) { return v_.get() + offset(layer, block); }
  const uint8_t* k_block(int64_t layer, int64_t block) const { return k_.get() + offset(layer, block); }
  const uint8_t* v_block(int64_t layer, int64_t block) const { return v_.get() + offset(layer, block); }
  uint64_t block_bytes() const { return block_bytes_; }
  uint64_t vec_bytes() const { return vec_bytes_; }  // one head vector of head_dim values

  // One position's K and V at `row` of `block` in `layer` (a window slot in a
  // window layer): n_kv_head vectors of head_dim floats each, back to back,
  // rounded or quantized to the pool's type on the way in (kernels/kv_quant.h)
  // and read back as f32. PRECONDITION: layer, block and row inside the pool.
  void store(int64_t layer, int64_t block, int64_t row, const float* k, const float* v);
  void load(int64_t layer, int64_t block, int64_t row, float* k, float* v) const;
  // The same in the pool's own format (n_kv_head vectors of vec_bytes() each);
  // store_raw leaves K as it is when k is null.
  void store_raw(int64_t layer, int64_t block, int64_t row, const uint8_t* k, const uint8_t* v);
  void load_raw(int64_t layer, int64_t block, int64_t row, uint8_t* k, uint8_t* v) const;

  // Bytes held by all KvStorage objects alive in the process (lets a test
  // prove that a cache-free pass allocated no cache).
  static uint64_t live_bytes();
  static uint64_t constructed();  // KvStorage objects ever built in the process
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  // Copies one block's K and V in every full layer (used to fork a shared
  // block); copy_window_block does the same for a window slot of the window
  // layers. Each returns the bytes it copied.
  uint64_t copy_block(int64_t dst, int64_t src);
  uint64_t copy_window_block(int64_t dst, int64_t src);

 private:
  uint64_t offset(int64_t layer, int64_t block) const {
    return layer_offset_[static_cast<size_t>(layer)] + static_cast<uint64_t>(block) * block_bytes_;
  }
  uint64_t copy_layers(bool window, int64_t dst, int64_t src);
  // Offset of kv head h's vector at `row` inside one layer's block.
  uint64_t row_offset(int64_t h, int64_t row) const {
    return (static_cast<uint64_t>(h) * static_cast<uint64_t>(block_size_) + static_cast<uint64_t>(row)) * vec_bytes_;
  }

  KvShape shape_;
  int64_t block_size_;
  int64_t n_blocks_;
  int64_t n_window_blocks_ = 0;
  int64_t n_window_layers_ = 0;
  std::vector<bool> window_layers_;
  DType type_;
  uint64_t vec_bytes_;    // bytes of one head vector
  uint64_t block_bytes_;  // one layer's block, all kv heads
  uint64_t half_bytes_;   // K (or V) of every layer
  std::vector<uint64_t> layer_offset_;  // where each layer's blocks start in k_ (and v_)
  LineBytes k_, v_;  // line-aligned: a block's rows start where a vector load does not split
};

}  // namespace tally
