#pragma once
// Hands out block ids of a KvStorage pool and counts their owners. A block is
// free iff its count is 0; ids are in [0, n_blocks). Sharing a block between
// sequences is one retain(); the block returns to the pool at the last release().
#include <cstdint>
#include <optional>
#include <vector>

namespace tally {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  std::optional<int32_t> allocate();  // count becomes 1; nullopt when none is free
  void retain(int32_t id);
  void release(int32_t id);
  int32_t owners(int32_t id) const;
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t total_blocks() const { return static_cast<int64_t>(owners_.size()); }

 private:
  void check(int32_t id) const;
  std::vector<int32_t> owners_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace tally
