#include "kv/window_slots.h"

#include "core/error.h"

namespace tally {

WindowSlots::WindowSlots(int64_t n_slots, int64_t n_blocks)
    : n_slots_(n_slots), slot_(static_cast<size_t>(n_blocks), -1), holders_(static_cast<size_t>(n_blocks), 0) {
  if (n_slots < 0 || n_blocks < 0) fail("a window pool of {} slots for {} blocks", n_slots, n_blocks);
  free_.reserve(static_cast<size_t>(n_slots));
  for (int64_t i = n_slots - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

void WindowSlots::check(int32_t block) const {
  if (block < 0 || block >= static_cast<int32_t>(slot_.size()))
    fail("KV block id {} is outside the pool of {} blocks", block, slot_.size());
}

std::optional<int32_t> WindowSlots::allocate(int32_t block) {
  check(block);
  if (slot_[block] >= 0) return slot_[block];
  if (free_.empty()) return std::nullopt;
  slot_[block] = free_.back();
  free_.pop_back();
  reclaimable_ += holders_[block] == 0;
  return slot_[block];
}

void WindowSlots::release(int32_t block) {
  check(block);
  if (slot_[block] < 0) return;
  reclaimable_ -= holders_[block] == 0;
  free_.push_back(slot_[block]);
  slot_[block] = -1;
}

void WindowSlots::hold(int32_t block) {
  check(block);
  if (holders_[block]++ == 0 && slot_[block] >= 0) --reclaimable_;
}

void WindowSlots::unhold(int32_t block) {
  check(block);
  if (holders_[block] == 0) fail("KV block {} is in no sequence's window range", block);
  if (--holders_[block] == 0 && slot_[block] >= 0) ++reclaimable_;
}

int64_t WindowSlots::reclaim() {
  int64_t n = 0;
  for (size_t b = 0; b < slot_.size() && reclaimable_ > 0; ++b)
    if (reclaimable(b)) {
      release(static_cast<int32_t>(b));
      ++n;
    }
  return n;
}

}  // namespace tally
