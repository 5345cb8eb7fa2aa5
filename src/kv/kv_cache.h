#pragma once
// The KV cache: storage (KvStorage, the block pool) kept apart from
// bookkeeping (which blocks each sequence holds and how many positions).
//
// Invariants:
//  - a sequence's positions are exactly [0, length), length <= its maximum;
//    position p is in blocks[p / block_size] at row p % block_size;
//  - writes only append at `length` (anything else is a broken continuity
//    and is refused); a refused write changes nothing;
//  - sequences share blocks (fork, the prefix cache); a block shared by
//    several sequences, or keyed by the prefix cache, is never written: the
//    first write into it copies it (copy-on-write), so a write never changes
//    what another sequence sees;
//  - a block returns to the pool with its last owner (keyed blocks stay
//    findable until they are evicted, least recently used first);
//  - a sequence id names one sequence for its life: the id of a freed
//    sequence is refused, even when its slot serves a new sequence.
//
// Sliding-window layers (options.window > 0): a query at p reads their keys
// from p - window + 1 only, so they keep their K/V in a smaller pool of
// window slots (KvStorage) that follow the blocks: block b's positions live
// in slot window_slot(b) there, or nowhere (-1) once no holder needs them.
//  - a sequence's window range, the blocks of positions [length - window + 1,
//    length) that its next write reads, always has slots; a write gets slots
//    for every block it touches; slots of blocks outside every sequence's
//    window range are taken back only when the window pool runs dry (so a
//    recent truncate or a cached prefix usually finds them still there);
//  - a prefix is taken from the cache only up to where its window range has
//    slots, and a truncate to a length whose window range lost its slots is
//    refused (resume_point() says how far back a sequence can continue).
//
// The prefix cache: every full block of a sequence whose tokens are known
// gets a key, hash(parent block's key, the block's token ids), so equal keys
// name equal prefixes (hash-chained). A key only finds candidates: a hit is
// taken after comparing the block's tokens and that its parent is the block
// taken just before (same id, same version), so a hash collision costs a miss,
// never a wrong cache. One thread owns a KvCache (not thread-safe).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/memory_info.h"  // available_memory_bytes(): the budget when none is given
#include "kernels/kv_layer_view.h"
#include "kv/block_allocator.h"
#include "kv/kv_storage.h"

namespace tally {

// The longest context a cache may hold. Far above any model tally runs, it
// keeps every position and byte product inside 64 bits, and a mistyped -c a
// clear refusal instead of an allocation that wraps.
inline constexpr int64_t kMaxContextTokens = int64_t{1} << 24;

// What a cache is built with unless told otherwise: positions per block, and
// the tokens one step writes (a prefill chunk), which the window layers' pool
// must hold beside the window.
inline constexpr int64_t kDefaultBlockSize = 32;
inline constexpr int64_t kDefaultBatchTokens = 512;

struct KvCacheOptions {
  int64_t n_ctx = 4096;       // positions the pool can hold in total (1 to kMaxContextTokens)
  int64_t block_size = kDefaultBlockSize;  // positions per block
  DType type = DType::F16;    // F32, F16, Q8_0 or Q4_0 (the block formats need head_dim % 32 == 0)
  uint64_t budget_bytes = 0;  // 0: the machine's available memory (available_memory_bytes())
  bool prefix_cache = true;   // key full blocks and let new sequences take cached prefixes
  // Sliding-window layers: window_layers[l] for the n_layer layers (empty: none)
  // read only the last `window` positions. Their pool holds, for each of
  // max_sequences sequences, a window and a step of max_batch positions
  // (never more than the full layers' pool).
  int64_t window = 0;
  std::vector<bool> window_layers = {};
  int64_t max_sequences = 1;
  int64_t max_batch = kDefaultBatchTokens;
};

// Blocks of the window layers' pool for a cache of n_blocks blocks with these
// options (0 without window layers), and the bytes such a cache allocates.
int64_t kv_window_pool_blocks(const KvCacheOptions& o, int64_t n_blocks);
uint64_t kv_cache_planned_bytes(const KvShape& shape, const KvCacheOptions& o);

// Counters since construction, and the pool's blocks now.
struct KvCacheStats {
  uint64_t lookups = 0;       // prefix-cache lookups (sequences created from a prefix)
  uint64_t hit_tokens = 0;    // positions those sequences took from the cache
  uint64_t evictions = 0;     // cached blocks handed out again for new content
  uint64_t copied_blocks = 0; // copy-on-write and full copies (fork_copy)
  uint64_t copied_bytes = 0;  // what those copies moved (a window slot's layers only where the block held one)
  int64_t blocks_free = 0;    // holding nothing
  int64_t blocks_used = 0;    // held by a sequence
  int64_t blocks_cached = 0;  // held by none, kept for the prefix cache (evictable)
  int64_t window_slots_used = 0;  // window-layer blocks holding positions (0 without window layers)
  int64_t window_slots = 0;       // the window pool's size
};

class KvCache {
 public:
  // Names one sequence: its slot and the slot's generation when it was created.
  struct SeqId {
    int32_t slot = -1;
    uint32_t gen = 0;
    bool operator==(const SeqId&) const = default;
  };

  KvCache(const KvShape& shape, const KvCacheOptions& opts);

  // A new empty sequence of at most max_len positions (0: the pool's size).
  SeqId create_sequence(int64_t max_len = 0);
  // A new sequence holding the longest cached prefix of `tokens` of at most
  // `limit` positions (whole blocks; none when the prefix cache is off).
  // Returns the sequence; its length() is the hit.
  SeqId create_sequence_from_prefix(std::span<const int32_t> tokens, int64_t limit, int64_t max_len = 0);
  // What create_sequence_from_prefix would take now, without taking it (no counter moves).
  struct PrefixProbe {
    int64_t positions = 0;         // the hit
    int64_t evictable_blocks = 0;  // of its blocks, those held by no sequence now
  };
  PrefixProbe probe_prefix(std::span<const int32_t> tokens, int64_t limit) const;
  // Blocks holding `positions` positions.
  int64_t blocks_for(int64_t positions) const { return (positions + block_size() - 1) / block_size(); }
  // A new sequence sharing every block of src (no copy until one of them writes).
  SeqId fork(SeqId src);
  // A new sequence with a copy of every block of src (the baseline that sharing is measured against).
  SeqId fork_copy(SeqId src);
  void free_sequence(SeqId seq);

  int64_t length(SeqId seq) const { return get(seq).length; }
  int64_t max_length(SeqId seq) const { return get(seq).max_len; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t block_size() const { return storage_.block_size(); }
  // Blocks a sequence needs to grow from `from` to `to` positions, counting a copy-on-write.
  int64_t blocks_needed(SeqId seq, int64_t to) const;
  // How many such blocks writes can take now: the allocator's, and with window
  // layers no more than the window slots that are free or out of every window range.
  int64_t available_blocks() const;
  bool prefix_cache() const { return prefix_cache_; }

  // Makes room for positions [start, start + tokens.size()) and records their
  // tokens (for the prefix cache's keys). PRECONDITION: start == length(seq),
  // else tally::Error ("broken continuity"); the sequence's maximum and the
  // pool's free blocks bound it too. Afterwards length(seq) == start + n.
  void begin_write(SeqId seq, int64_t start, std::span<const int32_t> tokens);
  // The same for n positions whose tokens are not known (such a sequence's
  // blocks are never keyed).
  void begin_write(SeqId seq, int64_t start, int64_t n);
  // The positions reserved so far are stored: full blocks get their keys.
  void end_write(SeqId seq);
  // Drops positions [n, length): later writes start at n (an edit recomputes
  // from there). With window layers, n must be resumable (resume_point(seq, n) == n).
  void truncate(SeqId seq, int64_t n);
  // The longest length m <= n that the sequence can be truncated to and
  // written on from: its window layers still hold [m - window + 1, m). n
  // itself without window layers.
  int64_t resume_point(SeqId seq, int64_t n) const;
  // Gives back the window slots of seq's blocks before its window range that
  // it alone holds (they would otherwise go only when the pool runs dry).
  void trim_window(SeqId seq);
  // Whether `layer` holds position pos of seq (false only for a window layer
  // whose slot for that block was taken back).
  bool holds(int64_t layer, SeqId seq, int64_t pos) const;
  // Drops positions [from, from + n) and moves the later ones n positions
  // down (a window sliding past the context). Each moved key goes through
  // fix_key (its layer, and the key as f32, n_kv_head * head_dim) before it
  // is stored back: the caller re-rotates it to its new position, with the
  // layer's RoPE base. Shared or keyed blocks are copied or unkeyed first, so
  // no other sequence sees the move.
  void remove_positions(SeqId seq, int64_t from, int64_t n,
                        const std::function<void(int64_t layer, float* k)>& fix_key);

  // Stores one position's K and V (n_kv_head * head_dim floats each),
  // rounded or quantized to the cache's type (kernels/kv_quant.h).
  // PRECONDITION: pos < length(seq) (reserved by begin_write).
  void store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v);
  KvLayerView view(int64_t layer, SeqId seq) const;
  // Reads one position's K and V back as f32 (n_kv_head * head_dim each).
  void load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const;
  // The same in the cache's own number format, kv heads back to back
  // (n_kv_head * head_dim values each): what a saved session holds.
  void store_raw(int64_t layer, SeqId seq, int64_t pos, const uint8_t* k, const uint8_t* v);
  void load_raw(int64_t layer, SeqId seq, int64_t pos, uint8_t* k, uint8_t* v) const;

  KvCacheStats stats() const;
  const KvStorage& storage() const { return storage_; }
  const BlockAllocator& allocator() const { return alloc_; }

 private:
  struct Sequence {
    bool live = false;
    uint32_t gen = 0;
    std::vector<int32_t> blocks;
    int64_t length = 0;
    int64_t max_len = 0;
    std::vector<int32_t> tokens;  // (length) when keyable
    bool keyable = true;          // every token known
    std::vector<uint64_t> keys;   // keys of blocks [0, keys.size()): the full blocks keyed so far
    std::vector<int32_t> window_blocks;  // window_slot_ of each block (the window layers' table)
  };
  const Sequence& get(SeqId seq) const;
  Sequence& get(SeqId seq);
  SeqId new_sequence(int64_t max_len);
  // The cached blocks of the longest cached prefix of tokens[0, limit), in order.
  std::vector<int32_t> walk_prefix(std::span<const int32_t> tokens, int64_t limit, std::vector<uint64_t>* keys) const;
  void reserve(Sequence& s, SeqId seq, int64_t start, int64_t n);
  void store_raw_v(int64_t layer, SeqId seq, int64_t pos, const uint8_t* v);  // V alone, as store_raw
  // copy(offset in the layer's block, offset in a position's vector, bytes, block, kv head) per kv head of `pos`
  // (block: the layer's own id, a window slot in a window layer).
  template <class Copy>
  void each_head(int64_t layer, SeqId seq, int64_t pos, const char* what, Copy copy) const;
  int32_t copy_of(int32_t block);  // a fresh block holding block's K/V; PRECONDITION: one is available

  // Window slots (empty functions without window layers).
  bool windowed() const { return window_ > 0; }
  // The first block of the window range of a sequence `length` long.
  int64_t window_first_block(int64_t length) const;
  // Whether blocks [first, end) of `blocks` all have slots.
  bool window_held(const std::vector<int32_t>& blocks, int64_t first, int64_t end) const;
  int32_t fresh_block(bool with_slot);  // allocate(), with a window slot or without
  void release_block(int32_t block);    // alloc_.release(), and the slot back once the block is free
  void give_slot(int32_t block);        // a free slot for block, unless it has one (fails when none is free)
  void drop_slot(int32_t block);        // block's slot, if any, back to the free ones
  // Makes `n` slots free, taking back those of blocks outside every window range; false if it cannot.
  bool reserve_window_slots(int64_t n);
  void take_back_window_slots();  // every slot of a block outside every sequence's window range
  std::vector<uint8_t> window_needed() const;  // per block: in some live sequence's window range
  void sync_window(Sequence& s);  // s.window_blocks from s.blocks

  KvStorage storage_;
  BlockAllocator alloc_;
  int64_t n_ctx_;
  bool prefix_cache_;
  std::vector<Sequence> seqs_;
  // Per block, what its key was computed from (valid while keyed): its tokens,
  // its parent block and the parent's version.
  std::vector<int32_t> block_tokens_;  // (n_blocks, block_size)
  std::vector<int32_t> parent_;
  std::vector<uint32_t> parent_version_;
  int64_t window_ = 0;
  std::vector<int32_t> window_slot_;  // per block: its window slot, or -1
  std::vector<int32_t> free_slots_;   // a stack of free window slots
  uint64_t lookups_ = 0, hit_tokens_ = 0, copied_blocks_ = 0, copied_bytes_ = 0;
};

}  // namespace tally
