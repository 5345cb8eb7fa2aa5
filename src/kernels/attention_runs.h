#pragma once
// The positions [b, e) of one kv head as runs that each lie in one cache
// block: a chunk of attention need not start or end on a block boundary (the
// cache-free pass has a single block of any size). An iterator rather than a
// callback so that SIMD kernels keep their accumulators in registers across
// runs (a lambda would not inherit their target attributes).
//
//   for (KvRuns r(kv, kv.k_layer, g, b, e); r.next();) use(r.ptr, r.pos, r.count);
#include <algorithm>
#include <cstdint>

#include "kv/kv_layer_view.h"

namespace tally {

struct KvRuns {
  KvRuns(const KvLayerView& kv, const uint8_t* layer, int64_t kv_head, int64_t b, int64_t e)
      : kv_(kv), layer_(layer), end_(e), pos(b) {
    const uint64_t vb = kv.type == DType::F32 ? 4 : 2;
    step = static_cast<uint64_t>(kv.pos_stride) * vb;
    head_ = static_cast<uint64_t>(kv_head) * static_cast<uint64_t>(kv.head_stride) * vb;
  }
  // Moves to the next run; false when [b, e) is done.
  bool next() {
    pos += count;
    if (pos >= end_) return false;
    const int64_t bi = pos / kv_.block_size, row = pos % kv_.block_size;
    count = std::min(kv_.block_size - row, end_ - pos);
    ptr = layer_ + static_cast<uint64_t>(kv_.blocks[bi]) * kv_.block_bytes + head_ + static_cast<uint64_t>(row) * step;
    return true;
  }

 private:
  const KvLayerView& kv_;
  const uint8_t* layer_;
  uint64_t head_ = 0;
  int64_t end_;

 public:
  const uint8_t* ptr = nullptr;  // the run's first vector
  uint64_t step = 0;             // bytes between positions
  int64_t pos;                   // the run's first position
  int64_t count = 0;             // positions in the run
};

}  // namespace tally
