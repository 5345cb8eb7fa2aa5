#include "kv/block_allocator.h"

#include "core/error.h"

namespace tally {

BlockAllocator::BlockAllocator(int64_t n_blocks) : owners_(n_blocks, 0) {
  free_.reserve(n_blocks);
  for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

void BlockAllocator::check(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(owners_.size()))
    fail("KV block id {} is outside the pool of {} blocks", id, owners_.size());
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t id = free_.back();
  free_.pop_back();
  owners_[id] = 1;
  return id;
}

void BlockAllocator::retain(int32_t id) {
  check(id);
  if (owners_[id] == 0) fail("KV block {} is free and cannot be shared", id);
  ++owners_[id];
}

void BlockAllocator::release(int32_t id) {
  check(id);
  if (owners_[id] == 0) fail("KV block {} released twice", id);
  if (--owners_[id] == 0) free_.push_back(id);
}

int32_t BlockAllocator::owners(int32_t id) const {
  check(id);
  return owners_[id];
}

}  // namespace tally
