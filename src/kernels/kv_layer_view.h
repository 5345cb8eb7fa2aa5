#pragma once
// What the attention kernel reads for one layer of one sequence: the sequence's
// block table over the storage pool. Non-owning; valid until the next write.
// Key j of kv head h in table entry bi starts at
//   k_layer + blocks[bi] * block_bytes + (h * head_stride + j * pos_stride) * value bytes,
// which describes both the cache's (head, position, dim) blocks and a plain
// (position, head, dim) buffer of one chunk (the cache-free encoder pass).
#include <cstdint>

#include "core/dtype.h"

namespace tally {

struct KvLayerView {
  const uint8_t* k_layer = nullptr;  // block 0 of this layer; block b at + b * block_bytes
  const uint8_t* v_layer = nullptr;
  uint64_t block_bytes = 0;          // (n_kv_head, block_size, head_dim) values
  const int32_t* blocks = nullptr;   // block table: position p lives in blocks[p / block_size]
  int64_t length = 0;                // positions written
  int64_t block_size = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t head_stride = 0;  // values between kv heads
  int64_t pos_stride = 0;   // values between positions
  DType type = DType::F16;

  // Start of the (block_size, head_dim) keys of kv head h in table entry bi.
  const uint8_t* k_head(int64_t bi, int64_t h) const { return at(k_layer, bi, h); }
  const uint8_t* v_head(int64_t bi, int64_t h) const { return at(v_layer, bi, h); }

 private:
  const uint8_t* at(const uint8_t* base, int64_t bi, int64_t h) const {
    const uint64_t vb = type == DType::F32 ? 4 : 2;
    return base + static_cast<uint64_t>(blocks[bi]) * block_bytes +
           static_cast<uint64_t>(h) * head_stride * vb;
  }
};

}  // namespace tally
