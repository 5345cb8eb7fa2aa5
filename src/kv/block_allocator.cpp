#include "kv/block_allocator.h"

#include "core/error.h"

namespace tally {

BlockAllocator::BlockAllocator(int64_t n_blocks)
    : owners_(n_blocks, 0), keyed_(n_blocks, 0), key_(n_blocks, 0), version_(n_blocks, 0), prev_(n_blocks, -1),
      next_(n_blocks, -1) {
  free_.reserve(n_blocks);
  for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

void BlockAllocator::check(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(owners_.size()))
    fail("KV block id {} is outside the pool of {} blocks", id, owners_.size());
}

void BlockAllocator::lru_push(int32_t id) {
  prev_[id] = lru_tail_;
  next_[id] = -1;
  if (lru_tail_ >= 0) next_[lru_tail_] = id;
  else lru_head_ = id;
  lru_tail_ = id;
  ++evictable_;
}

void BlockAllocator::lru_remove(int32_t id) {
  if (prev_[id] >= 0) next_[prev_[id]] = next_[id];
  else lru_head_ = next_[id];
  if (next_[id] >= 0) prev_[next_[id]] = prev_[id];
  else lru_tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  --evictable_;
}

std::optional<int32_t> BlockAllocator::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    id = lru_head_;
    lru_remove(id);
    index_.erase(key_[id]);
    keyed_[id] = 0;
    ++evictions_;
  } else {
    return std::nullopt;
  }
  owners_[id] = 1;
  ++version_[id];
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
  if (--owners_[id] > 0) return;
  if (keyed_[id]) lru_push(id);
  else free_.push_back(id);
}

int32_t BlockAllocator::owners(int32_t id) const {
  check(id);
  return owners_[id];
}

bool BlockAllocator::set_key(int32_t id, uint64_t key) {
  check(id);
  if (owners_[id] == 0) fail("KV block {} is free and cannot be keyed", id);
  if (keyed_[id] || index_.count(key)) return false;
  keyed_[id] = 1;
  key_[id] = key;
  index_.emplace(key, id);
  return true;
}

std::optional<int32_t> BlockAllocator::find(uint64_t key) const {
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void BlockAllocator::take(int32_t id) {
  check(id);
  if (!keyed_[id]) fail("KV block {} holds no cached prefix", id);
  if (owners_[id] == 0) lru_remove(id);
  ++owners_[id];
}

void BlockAllocator::unkey(int32_t id) {
  check(id);
  if (!keyed_[id]) return;
  index_.erase(key_[id]);
  keyed_[id] = 0;
  if (owners_[id] == 0) {  // evictable -> free
    lru_remove(id);
    free_.push_back(id);
  }
}

}  // namespace tally
