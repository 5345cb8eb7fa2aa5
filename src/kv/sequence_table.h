#pragma once
// The sequences of a KvCache: what the cache knows of each (its block table,
// length, tokens and prefix-cache keys), found by id.
//
// Invariants:
//  - an id names one sequence for its life: a freed sequence's entry serves a
//    later sequence under the next generation, and the old id is refused
//    (get() throws tally::Error naming it);
//  - entries are reused lowest first, so ids stay small and the table never
//    holds more entries than sequences were ever alive at once.
// One thread owns a SequenceTable (not thread-safe).
#include <cstdint>
#include <vector>

#include "kv/kv_disk.h"

namespace tally {

// Names one sequence: its entry in the table and the entry's generation when it was created.
struct KvSeqId {
  int32_t index = -1;
  uint32_t gen = 0;
  bool operator==(const KvSeqId&) const = default;
};

// What the cache knows of one sequence.
struct KvSequence {
  std::vector<int32_t> blocks;  // block table: position p lives in blocks[p / block_size]
  int64_t length = 0;           // positions [0, length) are written or reserved
  int64_t max_len = 0;          // its own bound on length (at most the pool's)
  std::vector<int32_t> tokens;  // (length) while keyable
  bool keyable = true;          // every token known: its full blocks get prefix-cache keys
  std::vector<uint64_t> keys;   // keys of blocks [0, keys.size()): the full blocks keyed so far
  std::vector<BlockDigest> digests;  // with a disk tier: the names of blocks [0, digests.size() <= keys.size())
  // Positions from here on hold K/V that a step read before their disk
  // check failed (-1: none): the step evaluates them again (KvCache::settle).
  int64_t stale_from = -1;
  // Window layers only: each block's window slot (the block table those layers
  // read), and the blocks [held_first, held_end) counted as its window range in
  // the cache's WindowSlots.
  std::vector<int32_t> window_blocks;
  int64_t held_first = 0, held_end = 0;
};

class SequenceTable {
 public:
  // A new empty sequence.
  KvSeqId create();
  // The sequence `id` names; throws tally::Error for an id never issued or freed.
  const KvSequence& get(KvSeqId id) const;
  KvSequence& get(KvSeqId id);
  // Forgets the sequence; its id is refused from now on. PRECONDITION: get(id) succeeds.
  void free(KvSeqId id);

  // Calls f(sequence) for every live sequence.
  template <class F>
  void each(F&& f) {
    for (Entry& e : entries_)
      if (e.live) f(e.seq);
  }

 private:
  struct Entry {
    bool live = false;
    uint32_t gen = 0;
    KvSequence seq;
  };
  std::vector<Entry> entries_;
};

}  // namespace tally
