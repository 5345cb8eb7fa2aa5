#pragma once
// The payloads of a prefix restored from the disk tier, read layer by layer
// on a thread of its own: a step over the restored sequence runs its layer l
// as soon as every block's layer l is in the pool, while the later layers are
// still being read, so the reads overlap the prefill of what was not cached.
//
// Invariants:
//  - layers become ready in order: ready(l) means every block's K and V of
//    full layer l are in the pool (a cache with window layers restores at
//    once instead: their K/V come last in a file, and its first layers are
//    window layers);
//  - a file's checksum covers its bytes in file order, which is layer order,
//    so a block is known good only once its last layer is read: until
//    finish(), any block may still prove bad, and whoever ran layers over it
//    evaluates those positions again (KvCache::settle());
//  - the thread touches nothing but its files and the pool memory it was
//    given; the destructor waits for it, so it never outlives the pool.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "kv/kv_disk.h"

namespace tally {

class KvRestore {
 public:
  struct Block {
    KvDiskFile file;            // identity checked (KvDisk::open), payload unread
    std::vector<uint8_t*> k, v;  // per layer, the pool memory its K and V go to
  };
  // Starts reading (at once, on this thread, when no thread can be started).
  // Every block's payload is its layers' K then V, block_bytes each.
  KvRestore(std::vector<Block> blocks, uint64_t block_bytes);
  ~KvRestore();
  KvRestore(const KvRestore&) = delete;
  KvRestore& operator=(const KvRestore&) = delete;

  // Waits until layer `layer` of every block is in the pool (any layer at or
  // past the last: until all are).
  void wait_layer(int64_t layer) const;
  // Waits for the thread; per block, whether every read succeeded and its
  // checksum passed.
  const std::vector<char>& finish();
  std::vector<Block>& blocks() { return blocks_; }
  double seconds() const { return seconds_; }  // reading and checking, on the thread

 private:
  void run();

  std::vector<Block> blocks_;
  uint64_t block_bytes_;
  int64_t n_layer_;
  std::vector<char> passed_;
  double seconds_ = 0;
  std::atomic<int64_t> ready_{0};  // layers in the pool
  std::thread thread_;
};

}  // namespace tally
