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

#include "kernels/kv_layer_view.h"

namespace tally {
// Internal linkage: the SIMD files include this too, and an out-of-line copy
// they compiled must never be the one the baseline code links to.
namespace {

struct KvRuns {
  KvRuns(const KvLayerView& kv, const uint8_t* layer, int64_t kv_head, int64_t b, int64_t e)
      : kv_(kv), layer_(layer), end_(e), pos(b) {
    step = kv.bytes_of(kv.pos_stride);
    head_ = kv.bytes_of(kv_head * kv.head_stride);
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

// How many positions ahead of the kernels keys and values are fetched.
inline constexpr int64_t kPrefetchAhead = 64;

// Asks for the vectors of positions [b, e) of one kv head to be brought into
// the cache (kL1: all levels, else L2 and beyond). A sequence's keys of one
// head lie in short runs (one block's rows) that the hardware prefetcher,
// which stops at page boundaries, follows late. (Inline assembly: g++ drops
// a loop of nothing but __builtin_prefetch as dead code.)
template <bool kL1>
inline void prefetch_positions(const KvLayerView& kv, const uint8_t* layer, int64_t kv_head, int64_t b, int64_t e) {
  const uint64_t row = kv.bytes_of(kv.head_dim);
  for (KvRuns r(kv, layer, kv_head, b, e); r.next();)
    for (int64_t j = 0; j < r.count; ++j)
      for (uint64_t off = 0; off < row; off += 64) {
        const uint8_t* p = r.ptr + j * r.step + off;
#if defined(__x86_64__) || defined(__i386__)
        if constexpr (kL1) asm volatile("prefetcht0 %0" : : "m"(*p));
        else asm volatile("prefetcht1 %0" : : "m"(*p));
#else
        __builtin_prefetch(p, 0, kL1 ? 3 : 2);
#endif
      }
}

}  // namespace
}  // namespace tally
