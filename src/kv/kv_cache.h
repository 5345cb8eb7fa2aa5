#pragma once
// The KV cache: storage (KvStorage, the block pool) kept apart from
// bookkeeping (which blocks each sequence owns and how many positions it has).
// Invariants: a sequence's positions are exactly [0, length); position p is in
// blocks[p / block_size] at row p % block_size; writes only append at `length`
// (anything else is a broken continuity and is refused); blocks past the
// length are returned to the pool. One thread owns a KvCache (not thread-safe).
#include <cstdint>
#include <vector>

#include "kv/block_allocator.h"
#include "kernels/kv_layer_view.h"
#include "kv/kv_storage.h"

namespace tally {

// The longest context a cache may hold. Far above any model tally runs, it
// keeps every position and byte product inside 64 bits, and a mistyped -c a
// clear refusal instead of an allocation that wraps.
inline constexpr int64_t kMaxContextTokens = int64_t{1} << 24;

struct KvCacheOptions {
  int64_t n_ctx = 4096;       // positions the pool can hold in total (1 to kMaxContextTokens)
  int64_t block_size = 32;    // positions per block
  DType type = DType::F16;    // F16 or F32
  uint64_t budget_bytes = 0;  // 0: the machine's available memory
};

class KvCache {
 public:
  using SeqId = int32_t;

  KvCache(const KvShape& shape, const KvCacheOptions& opts);

  SeqId create_sequence();
  void free_sequence(SeqId seq);
  int64_t length(SeqId seq) const { return get(seq).length; }
  int64_t n_ctx() const { return n_ctx_; }

  // Makes room for positions [start, start + n). PRECONDITION: start == length(seq),
  // else tally::Error ("broken continuity"). Afterwards length(seq) == start + n.
  void begin_write(SeqId seq, int64_t start, int64_t n);
  // Drops positions [n, length): later writes start at n (an edit recomputes from there).
  void truncate(SeqId seq, int64_t n);

  // Stores one position's K and V (n_kv_head * head_dim floats each).
  // PRECONDITION: pos < length(seq) (reserved by begin_write).
  void store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v);
  KvLayerView view(int64_t layer, SeqId seq) const;
  // Reads one position's K and V back as f32 (n_kv_head * head_dim each).
  void load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const;

  const KvStorage& storage() const { return storage_; }
  const BlockAllocator& allocator() const { return alloc_; }

 private:
  struct Sequence {
    bool live = false;
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  const Sequence& get(SeqId seq) const;
  Sequence& get(SeqId seq);
  void store_vec(uint8_t* dst, const float* src) const;

  KvStorage storage_;
  BlockAllocator alloc_;
  int64_t n_ctx_;
  std::vector<Sequence> seqs_;
};

// Memory the cache may use when no budget is given: MemAvailable of this machine.
uint64_t available_memory_bytes();

}  // namespace tally
