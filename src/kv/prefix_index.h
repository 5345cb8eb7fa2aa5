#pragma once
// The prefix cache's index: which pool block holds which content, and the
// order in which the indexed blocks no sequence holds are given up.
//
// A key names a block's content: chain(parent block's key, the block's token
// ids), kRootKey standing for block 0's parent, so equal keys name equal
// prefixes (hash-chained). A key only finds a candidate: each indexed block
// keeps what its key was computed from (its tokens, its parent block and that
// block's version, BlockAllocator::version), and a lookup takes it only when
// those match, so a hash collision costs a miss, never a wrong cache.
//
// Invariants:
//  - a block is indexed under at most one key and a key names at most one
//    block; an indexed block is full and never written while indexed;
//  - the parked blocks are exactly the indexed blocks that no sequence holds
//    (the cache's owner says when: park, unpark); they form a list, least
//    recently parked first, and evict() gives up the first and forgets its key;
//  - nothing here reads or writes K/V: the index names blocks, the pool
//    (KvStorage) holds them, and the allocator owns them.
// One thread owns a PrefixIndex (not thread-safe).
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_allocator.h"

namespace tally {

class PrefixIndex {
 public:
  static constexpr uint64_t kRootKey = 0x7a11'7a11'7a11'7a11ull;
  // The key of a block of `tokens` whose parent block has key `parent`.
  static uint64_t chain(uint64_t parent, std::span<const int32_t> tokens);

  // An index over the blocks [0, n_blocks) of block_size positions each.
  PrefixIndex(int64_t n_blocks, int64_t block_size);

  // Indexes a full block in use under `key`, with what the key was computed
  // from: its tokens (block_size of them), its parent block (-1 for block 0
  // of a sequence) and the parent's version. False, and nothing done, when
  // the block is indexed already or another block holds the key.
  bool insert(int32_t block, uint64_t key, std::span<const int32_t> tokens, int32_t parent, uint32_t parent_version);
  // Forgets a block's key (an indexed block about to be written).
  // PRECONDITION: not parked (a sequence holds it).
  void erase(int32_t block);
  bool indexed(int32_t block) const { return indexed_.at(static_cast<size_t>(block)) != 0; }

  // The blocks of the longest indexed prefix of tokens[0, limit), in order,
  // each verified against its tokens and against the block found before it
  // (versions from `alloc`); their keys are appended to `keys` if given.
  std::vector<int32_t> walk(std::span<const int32_t> tokens, int64_t limit, const BlockAllocator& alloc,
                            std::vector<uint64_t>* keys) const;

  // An indexed block no sequence holds any more goes to the most recently
  // used end of the list; one that a sequence takes again leaves it.
  void park(int32_t block);
  void unpark(int32_t block);
  bool parked(int32_t block) const { return parked_.at(static_cast<size_t>(block)) != 0; }
  // The least recently parked block, its key forgotten (nullopt: none parked).
  std::optional<int32_t> evict();

  int64_t parked_blocks() const { return n_parked_; }
  uint64_t evictions() const { return evictions_; }

 private:
  void check(int32_t block) const;

  int64_t block_size_;
  std::vector<uint8_t> indexed_, parked_;   // per block
  std::vector<uint64_t> key_;               // per block, valid while indexed
  std::unordered_map<uint64_t, int32_t> by_key_;
  // What each indexed block's key was computed from: its tokens (n_blocks,
  // block_size), its parent block and the parent's version.
  std::vector<int32_t> tokens_;
  std::vector<int32_t> parent_;
  std::vector<uint32_t> parent_version_;
  // Parked blocks, least recently parked first: a list through prev_/next_.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int64_t n_parked_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace tally
