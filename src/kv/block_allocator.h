#pragma once
// Hands out the block ids of a KvStorage pool and counts their owners (the
// sequences holding each block).
//
// Invariants:
//  - every id in [0, n_blocks) is in exactly one state: in use (owners > 0),
//    free (owners 0, on the free stack: holds nothing worth keeping), or kept
//    (owners 0, off the stack: a holder such as the prefix index keeps its
//    content for a later sequence, and says when it gives it up: discard);
//  - allocate() takes the free block on top of the stack and bumps its
//    version, so a (block, version) pair names one content;
//  - the counts of free and kept blocks are kept as states change, so every
//    count below is O(1).
// One thread owns a BlockAllocator (not thread-safe).
#include <cstdint>
#include <optional>
#include <vector>

namespace tally {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  std::optional<int32_t> allocate();  // owners become 1; nullopt when no block is free
  void retain(int32_t id);            // one more owner of a block in use
  // One owner less; at the last, the block becomes free, or kept when `keep`.
  void release(int32_t id, bool keep = false);
  void take(int32_t id);     // one more owner of a block in use or kept (a kept one is in use again)
  void discard(int32_t id);  // a kept block becomes free
  int32_t owners(int32_t id) const;
  bool kept(int32_t id) const { return kept_.at(static_cast<size_t>(id)) != 0; }
  // Bumped each time a block is handed out fresh: a (block, version) pair names one content.
  uint32_t version(int32_t id) const { return version_.at(static_cast<size_t>(id)); }

  int64_t total_blocks() const { return static_cast<int64_t>(owners_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }      // owners 0, nothing kept
  int64_t kept_blocks() const { return n_kept_; }                                  // owners 0, kept (evictable)
  int64_t available_blocks() const { return free_blocks() + kept_blocks(); }      // free once the kept are given up
  int64_t used_blocks() const { return total_blocks() - available_blocks(); }

 private:
  void check(int32_t id) const;

  std::vector<int32_t> owners_;
  std::vector<uint8_t> kept_;
  std::vector<uint32_t> version_;
  std::vector<int32_t> free_;  // a stack; initially every id, lowest on top
  int64_t n_kept_ = 0;
};

}  // namespace tally
