#include "kv/block_allocator.h"

#include "core/error.h"

namespace tally {

BlockAllocator::BlockAllocator(int64_t n_blocks)
    : owners_(static_cast<size_t>(n_blocks), 0),
      kept_(static_cast<size_t>(n_blocks), 0),
      version_(static_cast<size_t>(n_blocks), 0) {
  free_.reserve(static_cast<size_t>(n_blocks));
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
  ++version_[id];
  return id;
}

void BlockAllocator::retain(int32_t id) {
  check(id);
  if (owners_[id] == 0) fail("KV block {} is free and cannot be shared", id);
  ++owners_[id];
}

void BlockAllocator::release(int32_t id, bool keep) {
  check(id);
  if (owners_[id] == 0) fail("KV block {} released twice", id);
  if (--owners_[id] > 0) return;
  if (keep) {
    kept_[id] = 1;
    ++n_kept_;
  } else {
    free_.push_back(id);
  }
}

void BlockAllocator::take(int32_t id) {
  check(id);
  if (owners_[id] == 0) {
    if (!kept_[id]) fail("KV block {} is free: it holds nothing to take", id);
    kept_[id] = 0;
    --n_kept_;
  }
  ++owners_[id];
}

void BlockAllocator::discard(int32_t id) {
  check(id);
  if (!kept_[id]) fail("KV block {} is not kept", id);
  kept_[id] = 0;
  --n_kept_;
  free_.push_back(id);
}

int32_t BlockAllocator::owners(int32_t id) const {
  check(id);
  return owners_[id];
}

}  // namespace tally
