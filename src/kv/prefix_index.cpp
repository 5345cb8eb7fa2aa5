#include "kv/prefix_index.h"

#include <algorithm>

#include "core/error.h"

namespace tally {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t PrefixIndex::chain(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

PrefixIndex::PrefixIndex(int64_t n_blocks, int64_t block_size)
    : block_size_(block_size),
      indexed_(static_cast<size_t>(n_blocks), 0),
      parked_(static_cast<size_t>(n_blocks), 0),
      key_(static_cast<size_t>(n_blocks), 0),
      tokens_(static_cast<size_t>(n_blocks * block_size)),
      parent_(static_cast<size_t>(n_blocks), -1),
      parent_version_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks), -1),
      next_(static_cast<size_t>(n_blocks), -1) {
  if (n_blocks < 0 || block_size <= 0) fail("a prefix index needs blocks of positive size, got {}", block_size);
}

void PrefixIndex::check(int32_t block) const {
  if (block < 0 || block >= static_cast<int32_t>(indexed_.size()))
    fail("KV block id {} is outside the pool of {} blocks", block, indexed_.size());
}

bool PrefixIndex::insert(int32_t block, uint64_t key, std::span<const int32_t> tokens, int32_t parent,
                         uint32_t parent_version) {
  check(block);
  if (static_cast<int64_t>(tokens.size()) != block_size_)
    fail("a prefix-cache block holds {} tokens, got {}", block_size_, tokens.size());
  if (indexed_[block] || by_key_.count(key)) return false;
  indexed_[block] = 1;
  key_[block] = key;
  by_key_.emplace(key, block);
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  parent_[block] = parent;
  parent_version_[block] = parent_version;
  return true;
}

void PrefixIndex::erase(int32_t block) {
  check(block);
  if (!indexed_[block]) return;
  if (parked_[block]) fail("KV block {} is cached and held by no sequence: it cannot be written", block);
  by_key_.erase(key_[block]);
  indexed_[block] = 0;
}

std::vector<int32_t> PrefixIndex::walk(std::span<const int32_t> tokens, int64_t limit, const BlockAllocator& alloc,
                                       std::vector<uint64_t>* keys) const {
  std::vector<int32_t> found;
  const int64_t bs = block_size_;
  limit = std::min(limit, static_cast<int64_t>(tokens.size()));
  uint64_t key = kRootKey;
  int32_t parent = -1;
  uint32_t parent_version = 0;
  for (int64_t i = 0; (i + 1) * bs <= limit; ++i) {
    const auto chunk = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    key = chain(key, chunk);
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) break;
    const int32_t b = it->second;
    const int32_t* stored = tokens_.data() + static_cast<size_t>(b) * bs;
    if (!std::equal(chunk.begin(), chunk.end(), stored) || parent_[b] != parent || parent_version_[b] != parent_version)
      break;  // a hash collision: a different prefix under the same key
    found.push_back(b);
    if (keys) keys->push_back(key);
    parent = b;
    parent_version = alloc.version(b);
  }
  return found;
}

void PrefixIndex::park(int32_t block) {
  check(block);
  if (!indexed_[block]) fail("KV block {} holds no cached prefix", block);
  if (parked_[block]) return;
  parked_[block] = 1;
  prev_[block] = tail_;
  next_[block] = -1;
  if (tail_ >= 0) next_[tail_] = block;
  else head_ = block;
  tail_ = block;
  ++n_parked_;
}

void PrefixIndex::unpark(int32_t block) {
  check(block);
  if (!parked_[block]) return;
  if (prev_[block] >= 0) next_[prev_[block]] = next_[block];
  else head_ = next_[block];
  if (next_[block] >= 0) prev_[next_[block]] = prev_[block];
  else tail_ = prev_[block];
  prev_[block] = next_[block] = -1;
  parked_[block] = 0;
  --n_parked_;
}

std::optional<int32_t> PrefixIndex::evict() {
  if (head_ < 0) return std::nullopt;
  const int32_t block = head_;
  unpark(block);
  erase(block);
  ++evictions_;
  return block;
}

}  // namespace tally
