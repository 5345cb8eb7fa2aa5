#pragma once
// The KV cache: a front over storage (KvStorage, the block pool) and the
// bookkeeping kept in parts of their own:
//   SequenceTable  which blocks each sequence holds, how many positions, its tokens
//   BlockAllocator the pool's block ids and how many sequences own each
//   PrefixIndex    the prefix cache: blocks by content, evictable ones in LRU order
//   WindowSlots    the sliding-window layers' smaller pool, lent to blocks
//   KvDisk         the prefix cache's disk tier (with options.disk.dir)
// The front keeps them consistent (copy-on-write, keying, the window ranges);
// the slide of a stream (remove_positions) lives in kv_slide.cpp.
//
// Invariants:
//  - a sequence's positions are exactly [0, length), length <= its maximum;
//    position p is in blocks[p / block_size] at row p % block_size;
//  - writes only append at `length` (anything else is a broken continuity
//    and is refused); a refused write changes nothing;
//  - sequences share blocks (fork, the prefix cache); a block shared by
//    several sequences, or indexed by the prefix cache, is never written: the
//    first write into it copies it (copy-on-write), so a write never changes
//    what another sequence sees;
//  - a block returns to the pool with its last owner (indexed blocks stay
//    findable until they are evicted, least recently used first): the
//    allocator keeps an indexed block no sequence owns exactly while the
//    prefix index has it parked;
//  - a sequence id names one sequence for its life: the id of a freed
//    sequence is refused, even when its table entry serves a new sequence.
//
// Sliding-window layers (options.window > 0): a query at p reads their keys
// from p - window + 1 only, so they keep their K/V in a smaller pool of
// window slots (WindowSlots, KvStorage) that follow the blocks: block b's
// positions live in slot slot(b) there, or nowhere (-1) once no holder needs them.
//  - a sequence's window range, the blocks of positions [length - window + 1,
//    length) that its next write reads, always has slots, and each of its
//    blocks counts the sequence among its holders; a write gets slots for
//    every block it touches; slots of blocks outside every sequence's window
//    range are taken back only when the window pool runs dry (so a recent
//    truncate or a cached prefix usually finds them still there);
//  - a prefix is taken from the cache only up to where its window range has
//    slots, and a truncate to a length whose window range lost its slots is
//    refused (resume_point() says how far back a sequence can continue).
//
// The prefix cache: every full block of a sequence whose tokens are known is
// indexed under hash(parent block's key, the block's token ids) (PrefixIndex);
// a hit is verified against the block's tokens and its parent, so a hash
// collision costs a miss, never a wrong cache. A hit is whole blocks but may
// end inside its last one (at the limit asked for): that block stays keyed
// and shared, so the sequence's first write copies it.
//
// The disk tier (kv_disk.h): each block the prefix cache keys is also written
// to disk as it is keyed (write-through: the window layers' K/V are at hand
// then, and a crash loses nothing), and a prefix lookup that ends in RAM
// goes on on disk, loading the blocks it finds into fresh pool blocks that
// are then indexed as if computed here. A sliding-window model's blocks get
// window slots only inside the window range of the prefix restored.
//  - Reads overlap the prefill (kv_restore.h): a restore checks each file's
//    identity at once and reads the payloads of the blocks the hit fills on a
//    thread, layer by layer; view() of the restored sequence waits for its
//    layer, and the step that ran over it calls settle(), which waits for the
//    checksums and indexes the blocks that passed. A block that failed makes
//    its positions and all later ones stale: the step evaluates them again
//    before its output is used. Until then the blocks are unindexed and the
//    sequence's alone; anything else that reads or changes that sequence
//    settles first. (The partly used last block of a hit, which a write
//    copies, and caches with window layers are loaded at once.)
// One thread owns a KvCache (not thread-safe).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/memory_info.h"  // available_memory_bytes(): the budget when none is given
#include "kernels/kv_layer_view.h"
#include "kv/block_allocator.h"
#include "kv/kv_disk.h"
#include "kv/kv_restore.h"
#include "kv/kv_storage.h"
#include "kv/prefix_index.h"
#include "kv/sequence_table.h"
#include "kv/window_slots.h"

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
  // The disk tier (needs prefix_cache), and the model the blocks belong to.
  KvDiskOptions disk = {};
  uint64_t model_fingerprint = 0;
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
  int64_t window_slots_used = 0;  // window slots lent to blocks (0 without window layers)
  int64_t window_slots = 0;       // the window pool's size
  uint64_t disk_hit_tokens = 0;   // of hit_tokens, those loaded from the disk tier
  KvDiskStats disk;               // zeros without a disk tier
};

class KvCache {
 public:
  using SeqId = KvSeqId;

  KvCache(const KvShape& shape, const KvCacheOptions& opts);

  // A new empty sequence of at most max_len positions (0: the pool's size).
  SeqId create_sequence(int64_t max_len = 0);
  // A new sequence holding the longest cached prefix of `tokens` of at most
  // `limit` positions (none when the prefix cache is off). The cache keeps
  // whole blocks, so the hit takes the blocks that hold it and may end inside
  // the last one (a prompt seen before, up to the token evaluated again).
  // Returns the sequence; its length() is the hit, of which *from_disk (if
  // given) positions were loaded from the disk tier.
  SeqId create_sequence_from_prefix(std::span<const int32_t> tokens, int64_t limit, int64_t max_len = 0,
                                    int64_t* from_disk = nullptr);
  // What create_sequence_from_prefix would take now, without taking it (no counter moves).
  struct PrefixProbe {
    int64_t positions = 0;         // the hit in RAM
    int64_t evictable_blocks = 0;  // of its blocks, those held by no sequence now
    int64_t disk_positions = 0;    // block files on disk that continue it (each needs a block to load into)
  };
  PrefixProbe probe_prefix(std::span<const int32_t> tokens, int64_t limit) const;
  // Blocks holding `positions` positions.
  int64_t blocks_for(int64_t positions) const { return (positions + block_size() - 1) / block_size(); }
  // A new sequence sharing every block of src (no copy until one of them writes).
  SeqId fork(SeqId src);
  // A new sequence with a copy of every block of src (the baseline that sharing is measured against).
  SeqId fork_copy(SeqId src);
  void free_sequence(SeqId seq);

  int64_t length(SeqId seq) const { return seqs_.get(seq).length; }
  int64_t max_length(SeqId seq) const { return seqs_.get(seq).max_len; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t block_size() const { return storage_.block_size(); }
  // Blocks a sequence needs to grow to `to` positions, counting a copy-on-write.
  int64_t blocks_needed(SeqId seq, int64_t to) const;
  // How many such blocks writes can take now: the allocator's free and
  // evictable ones, and with window layers no more than the window slots
  // that are free or reclaimable. O(1): both are counts kept as they change.
  int64_t available_blocks() const;
  bool prefix_cache() const { return index_.has_value(); }

  // Makes room for positions [start, start + tokens.size()) and records their
  // tokens (for the prefix cache's keys). PRECONDITION: start == length(seq),
  // else tally::Error ("broken continuity"); the sequence's maximum and the
  // pool's free blocks bound it too. Afterwards length(seq) == start + n.
  void begin_write(SeqId seq, int64_t start, std::span<const int32_t> tokens);
  // The same for n positions whose tokens are not known (such a sequence's
  // blocks are never keyed).
  void begin_write(SeqId seq, int64_t start, int64_t n);
  // The positions reserved so far are stored: full blocks get their keys,
  // those before position keyed_until only (a draft's guesses after it may be
  // rolled back: their blocks are keyed by a later write, once kept).
  void end_write(SeqId seq, int64_t keyed_until = INT64_MAX);
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
  // down (a window sliding past the context; kv_slide.cpp). Each moved key
  // goes through fix_key (its layer, and the key as f32, n_kv_head *
  // head_dim) before it is stored back: the caller re-rotates it to its new
  // position, with the layer's RoPE base. Shared or keyed blocks are copied
  // or unkeyed first, so no other sequence sees the move.
  void remove_positions(SeqId seq, int64_t from, int64_t n,
                        const std::function<void(int64_t layer, float* k)>& fix_key);

  // Stores one position's K and V (n_kv_head * head_dim floats each),
  // rounded or quantized to the cache's type (kernels/kv_quant.h).
  // PRECONDITION: pos < length(seq) (reserved by begin_write).
  void store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v);
  // The K/V of `layer` as the attention kernels read them (waits for a
  // restore still reading that layer into seq).
  KvLayerView view(int64_t layer, SeqId seq) const;
  // After a step over seq: waits for a restore still reading into it, and
  // returns the first position whose K/V failed their disk check after the
  // step read them, which the caller evaluates again up to the step's start
  // (with the tokens below) before using its output, or -1. Forgets it.
  int64_t settle(SeqId seq);
  // The tokens of positions [from, to) of a sequence whose tokens are known.
  std::span<const int32_t> tokens(SeqId seq, int64_t from, int64_t to) const;
  // Reads one position's K and V back as f32 (n_kv_head * head_dim each).
  void load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const;
  // The same in the cache's own number format, kv heads back to back
  // (n_kv_head * head_dim values each): what a saved session holds.
  void store_raw(int64_t layer, SeqId seq, int64_t pos, const uint8_t* k, const uint8_t* v);
  void load_raw(int64_t layer, SeqId seq, int64_t pos, uint8_t* k, uint8_t* v) const;

  KvCacheStats stats() const;
  const KvStorage& storage() const { return storage_; }
  const BlockAllocator& allocator() const { return alloc_; }
  // The window layers' slots (a pool of none without window layers).
  const WindowSlots& window_slots() const { return slots_; }
  bool disk_tier() const { return disk_ != nullptr; }

 private:
  KvSeqId new_sequence(int64_t max_len);
  // Where position pos of seq lives in `layer`: its block (a window slot in a
  // window layer) and row, after the checks every read and write makes.
  struct Row {
    int64_t block, row;
  };
  Row locate(int64_t layer, SeqId seq, int64_t pos, const char* what) const;
  // The cached blocks create_sequence_from_prefix would take, in order: the
  // index's walk, cut back to where its window range has slots.
  std::vector<int32_t> cached_prefix(std::span<const int32_t> tokens, int64_t limit, std::vector<uint64_t>* keys) const;
  // A hit is made of whole cached blocks but ends at the limit, inside the
  // last one if need be: the tokens the blocks that may serve it cover (the
  // limit rounded up to a block, within the tokens), and the positions n
  // such blocks give.
  int64_t covering(std::span<const int32_t> tokens, int64_t limit) const;
  int64_t hit_length(int64_t n_blocks, int64_t limit) const { return std::min(n_blocks * block_size(), limit); }
  void reserve(KvSequence& s, SeqId seq, int64_t start, int64_t n);
  // The disk tier: the names of s's blocks up to its keys; the blocks of a
  // prefix found in RAM continued from disk (the window cut left to the caller).
  void name_blocks(KvSequence& s);
  void write_block(int32_t block, const KvSequence& s, int64_t i);
  void restore_from_disk(SeqId id, std::span<const int32_t> tokens, int64_t limit);
  // The restore still reading (if any): waits for it, indexes the blocks that
  // passed, marks the rest of its sequence stale.
  void settle_restore();
  void settle_if(SeqId seq) {
    if (restore_ && restore_seq_ == seq) settle_restore();
  }
  // Refuses to read K/V of seq that is not known good yet.
  void check_readable(SeqId seq, int64_t pos) const;

  // Indexes block i of s under s.keys[i] (its tokens given), as the child of block i - 1.
  void index_block(const KvSequence& s, size_t i, std::span<const int32_t> tokens);

  // The allocator and the prefix index together.
  bool indexed(int32_t block) const { return index_ && index_->indexed(block); }
  int32_t fresh_block(bool with_slot);  // a free block (else the index's LRU one), with a window slot or without
  void release_block(int32_t block);    // one owner less: at the last, parked if indexed, else free with its slot
  void take_block(int32_t block);       // one more owner of a block found by the prefix index
  void unindex(int32_t block);          // an indexed block this sequence alone holds, about to be written
  int32_t copy_of(int32_t block);       // a fresh block holding block's K/V; PRECONDITION: one is available

  // Window slots (empty functions without window layers).
  bool windowed() const { return window_ > 0; }
  // The first block of the window range of a sequence `length` long.
  int64_t window_first_block(int64_t length) const;
  // Whether blocks [first, end) of `blocks` all have slots.
  bool window_held(const std::vector<int32_t>& blocks, int64_t first, int64_t end) const;
  void give_slot(int32_t block);  // a slot for block, unless it has one (fails when none is free)
  // Makes `n` slots free, taking back reclaimable ones if needed; false if it cannot.
  bool reserve_window_slots(int64_t n);
  void take_back_window_slots();  // every reclaimable slot, and the sequences' window tables after
  // s's window range counted among its blocks' holders (hold_window), or no
  // longer (release_window): around every change of s.blocks or s.length.
  void hold_window(KvSequence& s);
  void release_window(KvSequence& s);
  void sync_window(KvSequence& s);  // s.window_blocks from s.blocks

  KvStorage storage_;
  BlockAllocator alloc_;
  std::optional<PrefixIndex> index_;  // none when the prefix cache is off
  std::unique_ptr<KvDisk> disk_;      // none without a disk tier
  WindowSlots slots_;
  SequenceTable seqs_;
  int64_t n_ctx_;
  int64_t window_ = 0;
  uint64_t lookups_ = 0, hit_tokens_ = 0, disk_hit_tokens_ = 0, copied_blocks_ = 0, copied_bytes_ = 0;
  // The restore still reading (after storage_: destroyed first, so its thread
  // never writes into a freed pool), its sequence and that sequence's first
  // block it reads. At most one at a time: a new one settles the last.
  std::unique_ptr<KvRestore> restore_;
  SeqId restore_seq_{};
  int64_t restore_first_ = 0;
  int64_t max_open_files_ = 0;  // block files a restore may hold open at once
};

}  // namespace tally
