#pragma once
// Hands out the block ids of a KvStorage pool, counts their owners, and keeps
// the prefix cache's index of blocks by content.
//
// Invariants:
//  - every id in [0, n_blocks) is in exactly one state: in use (owners > 0),
//    free (owners 0, no key: holds nothing worth keeping), or evictable
//    (owners 0, keyed: a full block whose K/V some later sequence may take);
//  - a keyed block is full and never written again while keyed; `index`
//    maps each key to exactly one keyed block (in use or evictable);
//  - allocate() takes a free block first (never used, or emptied), else the
//    least recently used evictable one, whose key it drops: the blocks a
//    prefix cache wants back are the last to go.
// One thread owns a BlockAllocator (not thread-safe).
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tally {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  std::optional<int32_t> allocate();  // owners become 1; nullopt when no block is free or evictable
  void retain(int32_t id);            // one more owner of a block in use
  void release(int32_t id);           // at the last owner: free, or evictable if keyed
  int32_t owners(int32_t id) const;

  // The prefix cache. A key names a block's content: a hash of its tokens and
  // of its parent's key (kv_cache.h). set_key keys a block in use (false, and
  // nothing done, when another block holds that key already); find returns
  // the block holding `key`; take() makes it one more owner's (an evictable
  // block leaves the eviction order); unkey() forgets a block's key.
  bool set_key(int32_t id, uint64_t key);
  std::optional<int32_t> find(uint64_t key) const;
  void take(int32_t id);
  void unkey(int32_t id);
  bool keyed(int32_t id) const { return keyed_.at(static_cast<size_t>(id)) != 0; }
  // Bumped each time a block is handed out fresh: a (block, version) pair names one content.
  uint32_t version(int32_t id) const { return version_.at(static_cast<size_t>(id)); }

  int64_t total_blocks() const { return static_cast<int64_t>(owners_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }      // owners 0, not keyed
  int64_t evictable_blocks() const { return evictable_; }                          // owners 0, keyed
  int64_t available_blocks() const { return free_blocks() + evictable_blocks(); }  // what allocate() can give
  int64_t used_blocks() const { return total_blocks() - available_blocks(); }
  uint64_t evictions() const { return evictions_; }

 private:
  void check(int32_t id) const;
  void lru_push(int32_t id);  // to the most recently used end
  void lru_remove(int32_t id);

  std::vector<int32_t> owners_;
  std::vector<int32_t> free_;  // a stack; initially every id, lowest on top
  std::vector<uint8_t> keyed_;
  std::vector<uint64_t> key_;
  std::vector<uint32_t> version_;
  std::unordered_map<uint64_t, int32_t> index_;  // key -> block
  // Evictable blocks, least recently released first: a list through prev_/next_.
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t evictable_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace tally
