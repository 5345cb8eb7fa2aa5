#pragma once
// The sliding-window layers' pool: n_slots window slots lent to blocks of the
// full layers' pool (KvStorage keeps the window layers' K/V by slot). A
// block's positions live in those layers in the block's slot, or nowhere.
// The interface is BlockAllocator's, for slots lent to blocks: allocate,
// release and the counts total / free / available / used; a block's holders
// (the sequences whose window range, the blocks their next write reads in a
// window layer, contains it) play the part of owners.
//
// Invariants:
//  - a slot is free or lent to exactly one block; a block has at most one;
//  - a lent slot whose block has no holder is reclaimable: it is kept (a
//    truncate or a cached prefix may want the block's window back) until
//    reclaim() takes back every such slot, which the cache does only when the
//    free ones run short;
//  - free_slots() and reclaimable_slots() are counts kept as slots and
//    holders change: available_slots() is O(1).
// One thread owns a WindowSlots (not thread-safe).
#include <cstdint>
#include <optional>
#include <vector>

namespace tally {

class WindowSlots {
 public:
  // n_slots slots for the blocks [0, n_blocks).
  WindowSlots(int64_t n_slots, int64_t n_blocks);

  // The block's slot: its own, else a free one (nullopt when none is free).
  std::optional<int32_t> allocate(int32_t block);
  // The block's slot, if it has one, back to the free ones.
  void release(int32_t block);
  // -1: the block has no slot.
  int32_t slot(int32_t block) const { return slot_.at(static_cast<size_t>(block)); }

  // One more, or one less, sequence whose window range contains the block.
  void hold(int32_t block);
  void unhold(int32_t block);
  int32_t holders(int32_t block) const { return holders_.at(static_cast<size_t>(block)); }

  // Takes back every reclaimable slot (blocks in ascending order); returns how many.
  int64_t reclaim();

  int64_t total_slots() const { return n_slots_; }
  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t reclaimable_slots() const { return reclaimable_; }                          // lent, block held by none
  int64_t available_slots() const { return free_slots() + reclaimable_slots(); }      // free after a reclaim()
  int64_t used_slots() const { return total_slots() - free_slots(); }                 // lent

 private:
  void check(int32_t block) const;
  bool reclaimable(size_t b) const { return slot_[b] >= 0 && holders_[b] == 0; }

  int64_t n_slots_;
  std::vector<int32_t> slot_;     // per block: its slot, or -1
  std::vector<int32_t> holders_;  // per block
  std::vector<int32_t> free_;     // a stack; initially every slot, lowest on top
  int64_t reclaimable_ = 0;
};

}  // namespace tally
