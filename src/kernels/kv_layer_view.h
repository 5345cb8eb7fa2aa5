#pragma once
// What the attention kernel reads for one layer of one sequence: the sequence's
// block table over the storage pool. Non-owning; valid until the next write.
// Key j of kv head h in table entry bi starts at
//   k_layer + blocks[bi] * block_bytes + bytes_of(h * head_stride + j * pos_stride),
// (bytes_of: the type's bytes per block over its values per block, from
// traits(); for Q8_0 / Q4_0 the strides and head_dim are multiples of 32),
// which describes both the cache's (head, position, dim) blocks and a plain
// (position, head, dim) buffer of one chunk (the cache-free encoder pass).
// The kernels, instantiated per format, use kernels/kv_format.h's constants.
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
  DType type = DType::F16;           // F32, F16, Q8_0 or Q4_0

  // Start of the (block_size, head_dim) keys of kv head h in table entry bi.
  const uint8_t* k_head(int64_t bi, int64_t h) const { return at(k_layer, bi, h); }
  const uint8_t* v_head(int64_t bi, int64_t h) const { return at(v_layer, bi, h); }
  // Bytes of n values (n a multiple of the type's block size).
  uint64_t bytes_of(int64_t n) const { return row_bytes(type, static_cast<uint64_t>(n)); }

 private:
  const uint8_t* at(const uint8_t* base, int64_t bi, int64_t h) const {
    return base + static_cast<uint64_t>(blocks[bi]) * block_bytes + bytes_of(h * head_stride);
  }
};

}  // namespace tally
