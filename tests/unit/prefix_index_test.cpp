// The prefix cache's index on its own (kv/prefix_index.h): hash-chained keys,
// a walk that verifies each block's tokens and parent (so a collision or a
// reused parent is a miss), refused duplicates, and the order in which parked
// blocks are given up.
#include <gtest/gtest.h>

#include <set>
#include <span>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/prefix_index.h"
#include "test_util.h"

namespace tally {
namespace {

using test::expect_error;

constexpr int64_t kBs = 4;

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = from + i;
  return t;
}

std::span<const int32_t> block_of(const std::vector<int32_t>& t, int64_t i) {
  return std::span<const int32_t>(t).subspan(static_cast<size_t>(i * kBs), kBs);
}

// A pool whose blocks hold a sequence's whole blocks, indexed as a cache's
// end_write would: block i's key chains on block i - 1's.
struct Indexed {
  BlockAllocator alloc;
  PrefixIndex index;
  Indexed(int64_t n_blocks) : alloc(n_blocks), index(n_blocks, kBs) {}

  std::vector<int32_t> add(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> blocks;
    uint64_t key = PrefixIndex::kRootKey;
    for (int64_t i = 0; (i + 1) * kBs <= static_cast<int64_t>(tokens.size()); ++i) {
      const int32_t b = *alloc.allocate();
      key = PrefixIndex::chain(key, block_of(tokens, i));
      const int32_t parent = i == 0 ? -1 : blocks.back();
      EXPECT_TRUE(index.insert(b, key, block_of(tokens, i), parent, i == 0 ? 0 : alloc.version(parent)));
      blocks.push_back(b);
    }
    return blocks;
  }
};

TEST(PrefixIndex, KeysChainOverTokensAndParent) {
  const auto a = range(1, 4), b = range(2, 4);
  const uint64_t k = PrefixIndex::chain(PrefixIndex::kRootKey, a);
  EXPECT_EQ(k, PrefixIndex::chain(PrefixIndex::kRootKey, a)) << "a key is a function of its inputs";
  EXPECT_NE(k, PrefixIndex::chain(PrefixIndex::kRootKey, b));
  EXPECT_NE(k, PrefixIndex::chain(k, a)) << "the same tokens under another parent are another block";
  const std::vector<int32_t> swapped = {2, 1, 3, 4};
  EXPECT_NE(k, PrefixIndex::chain(PrefixIndex::kRootKey, swapped)) << "order matters";
}

TEST(PrefixIndex, WalkFindsTheLongestVerifiedPrefixInWholeBlocks) {
  Indexed p(8);
  const auto tokens = range(10, 14);  // 3 whole blocks and 2 more tokens
  const auto blocks = p.add(tokens);
  ASSERT_EQ(blocks.size(), 3u);
  std::vector<uint64_t> keys;
  EXPECT_EQ(p.index.walk(tokens, 14, p.alloc, &keys), blocks);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0], PrefixIndex::chain(PrefixIndex::kRootKey, block_of(tokens, 0)));
  EXPECT_EQ(keys[2], PrefixIndex::chain(keys[1], block_of(tokens, 2)));
  // The limit counts positions: only the blocks wholly below it.
  EXPECT_EQ(p.index.walk(tokens, 11, p.alloc, nullptr), std::vector<int32_t>(blocks.begin(), blocks.begin() + 2));
  EXPECT_TRUE(p.index.walk(tokens, 3, p.alloc, nullptr).empty());
  // A prompt that differs in its second block takes the first only.
  auto other = tokens;
  other[5] = 99;
  EXPECT_EQ(p.index.walk(other, 14, p.alloc, nullptr), std::vector<int32_t>{blocks[0]});
  other[0] = 99;
  EXPECT_TRUE(p.index.walk(other, 14, p.alloc, nullptr).empty());
}

TEST(PrefixIndex, ACollisionOrAReusedParentIsAMiss) {
  Indexed p(8);
  const auto tokens = range(1, 8);
  const auto blocks = p.add(tokens);
  // Another block indexed under the key of range(50, 4)'s first block but
  // holding other tokens: what a hash collision looks like to the walk.
  const auto wanted = range(50, 4), held = range(60, 4);
  const int32_t b = *p.alloc.allocate();
  ASSERT_TRUE(p.index.insert(b, PrefixIndex::chain(PrefixIndex::kRootKey, wanted), held, -1, 0));
  EXPECT_TRUE(p.index.walk(wanted, 4, p.alloc, nullptr).empty()) << "a collision was taken as a hit";
  // The parent block handed out again (a new version): its old child no longer follows it.
  p.index.erase(blocks[0]);
  p.alloc.release(blocks[0]);
  ASSERT_EQ(p.alloc.allocate(), std::optional<int32_t>(blocks[0]));
  ASSERT_TRUE(p.index.insert(blocks[0], PrefixIndex::chain(PrefixIndex::kRootKey, block_of(tokens, 0)),
                             block_of(tokens, 0), -1, 0));
  EXPECT_EQ(p.index.walk(tokens, 8, p.alloc, nullptr), std::vector<int32_t>{blocks[0]})
      << "a child of the parent's old content was taken";
}

TEST(PrefixIndex, AKeyNamesOneBlockAndABlockOneKey) {
  Indexed p(4);
  const auto t = range(1, 4);
  const uint64_t k = PrefixIndex::chain(PrefixIndex::kRootKey, t);
  const int32_t a = *p.alloc.allocate(), b = *p.alloc.allocate();
  EXPECT_TRUE(p.index.insert(a, k, t, -1, 0));
  EXPECT_FALSE(p.index.insert(b, k, t, -1, 0)) << "two blocks under one key";
  EXPECT_FALSE(p.index.indexed(b));
  EXPECT_FALSE(p.index.insert(a, k + 1, t, -1, 0)) << "one block under two keys";
  EXPECT_EQ(p.index.walk(t, 4, p.alloc, nullptr), std::vector<int32_t>{a});
  p.index.erase(a);
  EXPECT_FALSE(p.index.indexed(a));
  EXPECT_TRUE(p.index.walk(t, 4, p.alloc, nullptr).empty());
  EXPECT_TRUE(p.index.insert(b, k, t, -1, 0)) << "an erased key is free again";
  expect_error([&] { p.index.insert(a, k + 2, range(1, 3), -1, 0); }, {"holds 4 tokens, got 3"});
  expect_error([&] { p.index.park(9); }, {"id 9", "4 blocks"});
  expect_error([&] { p.index.park(a); }, {"no cached prefix"});
}

TEST(PrefixIndex, ParkedBlocksAreGivenUpLeastRecentlyParkedFirst) {
  Indexed p(8);
  const auto x = p.add(range(1, 4)), y = p.add(range(100, 4)), z = p.add(range(200, 4));
  const int32_t a = x[0], b = y[0], c = z[0];
  for (int32_t blk : {a, b, c}) p.index.park(blk);
  EXPECT_EQ(p.index.parked_blocks(), 3);
  p.index.unpark(b);  // taken by a sequence, then freed again: now the most recent
  EXPECT_FALSE(p.index.parked(b));
  EXPECT_EQ(p.index.parked_blocks(), 2);
  expect_error([&] { p.index.erase(a); }, {"held by no sequence"});
  p.index.park(b);
  p.index.park(b);  // parking twice changes nothing
  EXPECT_EQ(p.index.parked_blocks(), 3);
  EXPECT_EQ(p.index.evict(), std::optional<int32_t>(a));
  EXPECT_FALSE(p.index.indexed(a)) << "an evicted block keeps its key";
  EXPECT_TRUE(p.index.walk(range(1, 4), 4, p.alloc, nullptr).empty());
  EXPECT_EQ(p.index.evict(), std::optional<int32_t>(c));
  EXPECT_EQ(p.index.evict(), std::optional<int32_t>(b));
  EXPECT_EQ(p.index.evict(), std::nullopt);
  EXPECT_EQ(p.index.parked_blocks(), 0);
  EXPECT_EQ(p.index.evictions(), 3u);
}

}  // namespace
}  // namespace tally
