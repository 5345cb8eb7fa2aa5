// Sequences sharing one KV pool (kv_cache.h): fork with copy-on-write, the
// prefix cache (hits, LRU eviction, nothing in use evicted), stale ids,
// per-sequence maximum lengths, and a randomized run of many operations whose
// owner counts and stored K/V are checked against a simple model after every
// step.
#include <gtest/gtest.h>

#include "test_util.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace tally {
namespace {

using test::expect_error;
using SeqId = KvCache::SeqId;

constexpr int64_t kBs = 4, kHd = 8;
const KvShape kShape{2, 1, kHd};

KvCacheOptions options(int64_t n_ctx, bool prefix_cache = true) {
  KvCacheOptions o;
  o.n_ctx = n_ctx;
  o.block_size = kBs;
  o.type = DType::F32;
  o.budget_bytes = 1u << 24;
  o.prefix_cache = prefix_cache;
  return o;
}

// What position p of a sequence holds: a fingerprint of its tokens [0, p],
// small enough that every value is exact in float. Equal prefixes store equal
// values; a block written by another sequence shows up as a wrong value.
uint32_t fingerprint(const std::vector<int32_t>& tokens, int64_t p) {
  uint32_t h = 2166136261u;
  for (int64_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
  return h & 0xFFFFF;
}
void kv_of(const std::vector<int32_t>& tokens, int64_t p, int64_t layer, float* k, float* v) {
  const uint32_t f = fingerprint(tokens, p);
  for (int64_t i = 0; i < kHd; ++i) {
    k[i] = static_cast<float>(f) + static_cast<float>(i + 16 * layer);
    v[i] = -static_cast<float>(f) - static_cast<float>(i + 16 * layer);
  }
}

// Appends tokens[from..] to seq (as a forward step would: reserve, store, key).
void write(KvCache& c, SeqId seq, const std::vector<int32_t>& tokens, int64_t from) {
  c.begin_write(seq, from, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(from)));
  float k[kHd], v[kHd];
  for (int64_t p = from; p < static_cast<int64_t>(tokens.size()); ++p)
    for (int64_t l = 0; l < kShape.n_layer; ++l) {
      kv_of(tokens, p, l, k, v);
      c.store(l, seq, p, k, v);
    }
  c.end_write(seq);
}

// Every position of seq holds what its own tokens say.
::testing::AssertionResult holds(const KvCache& c, SeqId seq, const std::vector<int32_t>& tokens) {
  if (c.length(seq) != static_cast<int64_t>(tokens.size()))
    return ::testing::AssertionFailure() << "length " << c.length(seq) << ", expected " << tokens.size();
  float k[kHd], v[kHd], ek[kHd], ev[kHd];
  for (int64_t p = 0; p < c.length(seq); ++p)
    for (int64_t l = 0; l < kShape.n_layer; ++l) {
      c.load(l, seq, p, k, v);
      kv_of(tokens, p, l, ek, ev);
      if (!std::equal(k, k + kHd, ek) || !std::equal(v, v + kHd, ev))
        return ::testing::AssertionFailure() << "position " << p << " layer " << l << " holds another sequence's K/V";
    }
  return ::testing::AssertionSuccess();
}

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = from + i;
  return t;
}

TEST(KvFork, SharesEveryBlockAndCopiesOnTheFirstWrite) {
  KvCache c(kShape, options(40));
  const auto a = c.create_sequence();
  std::vector<int32_t> ta = range(1, 10);  // 2 full blocks and half of a third
  write(c, a, ta, 0);
  const int64_t used = c.stats().blocks_used;
  const auto b = c.fork(a);
  EXPECT_EQ(c.stats().blocks_used, used) << "a fork takes no block";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.allocator().owners(c.view(0, a).blocks[i]), 2);
  EXPECT_TRUE(holds(c, b, ta));

  std::vector<int32_t> tb = ta;
  tb.push_back(77);  // b writes into the shared, partly filled third block
  write(c, b, tb, 10);
  EXPECT_EQ(c.stats().copied_blocks, 1u);
  EXPECT_NE(c.view(0, a).blocks[2], c.view(0, b).blocks[2]) << "the written block was not copied";
  EXPECT_EQ(c.view(0, a).blocks[0], c.view(0, b).blocks[0]) << "full blocks stay shared";
  EXPECT_TRUE(holds(c, a, ta)) << "b's write changed what a sees";
  EXPECT_TRUE(holds(c, b, tb));
  ta.push_back(88);  // a now writes into its own third block: no copy needed
  write(c, a, ta, 10);
  EXPECT_EQ(c.stats().copied_blocks, 1u);
  EXPECT_TRUE(holds(c, a, ta));
  EXPECT_TRUE(holds(c, b, tb));

  c.free_sequence(a);
  EXPECT_TRUE(holds(c, b, tb));
  c.free_sequence(b);
  EXPECT_EQ(c.stats().blocks_used, 0);
}

TEST(KvFork, FullCopyOwnsEveryBlock) {
  KvCache c(kShape, options(40));
  const auto a = c.create_sequence();
  const auto ta = range(1, 9);
  write(c, a, ta, 0);
  const auto b = c.fork_copy(a);
  EXPECT_EQ(c.stats().copied_blocks, 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(c.view(0, a).blocks[i], c.view(0, b).blocks[i]);
  EXPECT_TRUE(holds(c, b, ta));
}

TEST(KvFork, StaleAndUnknownIdsAreRefusedWithoutLeaking) {
  KvCache c(kShape, options(40));
  const auto a = c.create_sequence();
  write(c, a, range(1, 6), 0);
  c.free_sequence(a);
  const int64_t free_before = c.allocator().available_blocks();
  expect_error([&] { c.fork(a); }, {"was freed"});
  expect_error([&] { c.fork(SeqId{9, 1}); }, {"no sequence 9"});
  expect_error([&] { c.fork_copy(a); }, {"was freed"});
  EXPECT_EQ(c.allocator().available_blocks(), free_before);
  const auto b = c.create_sequence();  // reuses a's entry under a new generation
  EXPECT_EQ(b.index, a.index);
  expect_error([&] { c.begin_write(a, 0, 1); }, {"was freed"});
  EXPECT_EQ(c.length(b), 0);
}

TEST(KvSequence, MaximumLengthApartFromThePool) {
  KvCache c(kShape, options(40));
  const auto s = c.create_sequence(6);
  EXPECT_EQ(c.max_length(s), 6);
  write(c, s, range(1, 6), 0);
  expect_error([&] { c.begin_write(s, 6, 1); }, {"sequence", "maximum of 6"});
  EXPECT_EQ(c.length(s), 6);
  const auto long_one = c.create_sequence();  // the rest of the pool
  write(c, long_one, range(1, 32), 0);
  expect_error([&] { c.create_sequence(41); }, {"41", "pool of 40"});
}

TEST(KvPrefixCache, ANewSequenceTakesTheCachedBlocksOfItsPrefix) {
  KvCache c(kShape, options(40));
  const auto prompt = range(1, 14);  // 3 full blocks + 2
  const auto a = c.create_sequence();
  write(c, a, prompt, 0);
  c.free_sequence(a);
  EXPECT_EQ(c.stats().blocks_cached, 3) << "the full blocks stay, keyed";
  EXPECT_EQ(c.stats().blocks_used, 0);

  std::vector<int32_t> next = prompt;
  next.push_back(99);  // the same conversation, one token longer
  const auto b = c.create_sequence_from_prefix(next, static_cast<int64_t>(next.size()) - 1);
  EXPECT_EQ(c.length(b), 12);  // whole blocks only
  EXPECT_EQ(c.stats().lookups, 1u);
  EXPECT_EQ(c.stats().hit_tokens, 12u);
  EXPECT_EQ(c.stats().blocks_cached, 0);
  write(c, b, next, 12);  // only the rest is computed
  EXPECT_TRUE(holds(c, b, next));

  // Another prompt sharing only the first block hits one block; a different first token none.
  std::vector<int32_t> other = range(1, 4);
  for (int32_t t : {50, 51, 52, 53, 54}) other.push_back(t);
  const auto d = c.create_sequence_from_prefix(other, 8);
  EXPECT_EQ(c.length(d), 4);
  EXPECT_EQ(c.view(0, d).blocks[0], c.view(0, b).blocks[0]);
  const auto e = c.create_sequence_from_prefix(range(2, 9), 8);
  EXPECT_EQ(c.length(e), 0);

  // With the cache off nothing is kept or found.
  KvCache off(kShape, options(40, false));
  const auto x = off.create_sequence();
  write(off, x, prompt, 0);
  off.free_sequence(x);
  EXPECT_EQ(off.stats().blocks_cached, 0);
  EXPECT_EQ(off.length(off.create_sequence_from_prefix(next, 14)), 0);
}

// A prompt seen before is taken up to its last token, which is evaluated
// again (its logits are the output): the hit ends inside the block holding
// it, and the sequence's first write copies that block, which stays cached.
TEST(KvPrefixCache, AHitMayEndInsideItsLastBlock) {
  KvCache c(kShape, options(40));
  const auto prompt = range(1, 12);  // 3 full blocks
  const auto a = c.create_sequence();
  write(c, a, prompt, 0);
  c.free_sequence(a);
  EXPECT_EQ(c.probe_prefix(prompt, 11).positions, 11);

  const auto b = c.create_sequence_from_prefix(prompt, 11);
  EXPECT_EQ(c.length(b), 11);
  EXPECT_EQ(c.stats().hit_tokens, 11u);
  EXPECT_EQ(c.stats().blocks_used, 3);
  EXPECT_EQ(c.blocks_needed(b, 12), 1) << "the keyed last block is copied before it is written";
  std::vector<int32_t> edited(prompt.begin(), prompt.begin() + 11);
  edited.push_back(77);  // another last token: the cached block must not see it
  write(c, b, edited, 11);
  EXPECT_TRUE(holds(c, b, edited));
  EXPECT_EQ(c.stats().copied_blocks, 1u);

  const auto d = c.create_sequence_from_prefix(prompt, 12);
  EXPECT_TRUE(holds(c, d, prompt)) << "the cached block changed under the sequence that took it";
  const auto e = c.create_sequence_from_prefix(edited, 12);
  EXPECT_TRUE(holds(c, e, edited)) << "the copy was keyed once full";
  EXPECT_NE(c.view(0, d).blocks[2], c.view(0, e).blocks[2]);
}

TEST(KvPrefixCache, EvictsLeastRecentlyUsedTailsFirstAndNeverABlockInUse) {
  KvCache c(kShape, options(20));  // 5 blocks
  const auto a = c.create_sequence(), b = c.create_sequence();
  write(c, a, range(1, 8), 0);    // 2 keyed blocks
  write(c, b, range(100, 8), 0);  // 2 keyed blocks
  c.free_sequence(a);             // a's blocks first: the least recently used
  EXPECT_EQ(c.stats().blocks_cached, 2);
  const auto held = c.create_sequence_from_prefix(range(100, 8), 8);  // b's prefix, in use again
  c.free_sequence(b);
  EXPECT_EQ(c.length(held), 8);
  const auto big = c.create_sequence();
  write(c, big, range(500, 12), 0);  // 3 blocks: the free one, then a's tail, then a's head
  EXPECT_EQ(c.stats().evictions, 2u);
  EXPECT_TRUE(holds(c, held, range(100, 8))) << "a block in use was evicted";
  EXPECT_EQ(c.length(c.create_sequence_from_prefix(range(1, 8), 8)), 0) << "a's prefix was evicted";
  expect_error([&] { write(c, c.create_sequence(), range(900, 4), 0); }, {"out of blocks"});
}

TEST(KvPrefixCache, TruncatingIntoAKeyedBlockNeverChangesWhatOthersSee) {
  KvCache c(kShape, options(40));
  const auto a = c.create_sequence();
  const auto ta = range(1, 8);
  write(c, a, ta, 0);
  const auto b = c.create_sequence_from_prefix(ta, 8);  // shares both keyed blocks
  ASSERT_EQ(c.length(b), 8);
  c.truncate(b, 6);
  std::vector<int32_t> tb(ta.begin(), ta.begin() + 6);
  tb.push_back(40);
  write(c, b, tb, 6);  // writes into the shared keyed block: copied first
  EXPECT_TRUE(holds(c, a, ta));
  EXPECT_TRUE(holds(c, b, tb));
  c.free_sequence(b);
  c.truncate(a, 6);  // a alone: its key is dropped, and the block written in place
  std::vector<int32_t> ta2(ta.begin(), ta.begin() + 6);
  ta2.push_back(41);
  write(c, a, ta2, 6);
  EXPECT_TRUE(holds(c, a, ta2));
  EXPECT_EQ(c.length(c.create_sequence_from_prefix(ta, 8)), 4) << "the changed block is no longer cached as before";
}

// Many random admissions (from recurring prompts, so the prefix cache hits),
// forks, copies, appends, truncations, frees and refused writes; after every
// step each block's owner count equals the number of sequences holding it,
// the pool's blocks add up, and every sequence reads back its own K/V.
TEST(KvSharing, RandomOperationsKeepOwnerCountsAndContents) {
  std::mt19937 rng(11);
  KvCache c(kShape, options(96));  // 24 blocks
  std::map<int32_t, std::pair<SeqId, std::vector<int32_t>>> live;  // index -> (id, tokens)
  const std::vector<std::vector<int32_t>> prompts = {range(1, 11), range(1, 17), range(300, 9), range(1, 5)};
  auto pick = [&]() -> std::pair<SeqId, std::vector<int32_t>>& {
    auto it = live.begin();
    std::advance(it, static_cast<long>(rng() % live.size()));
    return it->second;
  };
  auto check_all = [&](int step) {
    std::vector<int32_t> owners(static_cast<size_t>(c.allocator().total_blocks()), 0);
    for (const auto& [index, st] : live) {
      const KvLayerView v = c.view(0, st.first);
      for (int64_t i = 0; i < (v.length + kBs - 1) / kBs; ++i) ++owners[v.blocks[i]];
      ASSERT_TRUE(holds(c, st.first, st.second)) << "step " << step << ", sequence " << index;
    }
    for (int32_t b = 0; b < c.allocator().total_blocks(); ++b)
      ASSERT_EQ(c.allocator().owners(b), owners[b]) << "step " << step << ", block " << b;
    const auto s = c.stats();
    ASSERT_EQ(s.blocks_free + s.blocks_cached + s.blocks_used, c.allocator().total_blocks()) << "step " << step;
  };
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 8);
    try {
      if (op <= 1 || live.empty()) {  // admit: a recurring prompt plus a random tail
        std::vector<int32_t> t = prompts[rng() % prompts.size()];
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) t.push_back(static_cast<int32_t>(1000 + rng() % 3));
        const SeqId s = c.create_sequence_from_prefix(t, static_cast<int64_t>(t.size()) - 1);
        const int64_t hit = c.length(s);
        live[s.index] = {s, std::vector<int32_t>(t.begin(), t.begin() + hit)};
        write(c, s, t, hit);
        live[s.index].second = t;
      } else if (op == 2) {
        auto& src = pick();
        const std::vector<int32_t> tokens = src.second;
        const SeqId s = c.fork(src.first);
        live[s.index] = {s, tokens};
      } else if (op == 3) {
        auto& src = pick();
        const SeqId s = c.fork_copy(src.first);
        live[s.index] = {s, src.second};
      } else if (op == 4) {  // append 1..6 tokens
        auto& st = pick();
        std::vector<int32_t> t = st.second;
        for (int i = 1 + static_cast<int>(rng() % 6); i > 0; --i) t.push_back(static_cast<int32_t>(rng() % 5));
        write(c, st.first, t, static_cast<int64_t>(st.second.size()));
        st.second = t;
      } else if (op == 5) {
        auto& st = pick();
        const int64_t n = static_cast<int64_t>(rng() % (st.second.size() + 1));
        c.truncate(st.first, n);
        st.second.resize(static_cast<size_t>(n));
      } else if (op == 6) {
        auto& st = pick();
        const int32_t index = st.first.index;
        c.free_sequence(st.first);
        live.erase(index);
      } else {  // a write at a wrong position is refused and changes nothing
        auto& st = pick();
        const int64_t wrong = static_cast<int64_t>(st.second.size()) + 1;
        EXPECT_THROW(c.begin_write(st.first, wrong, 1), Error);
      }
    } catch (const Error& e) {
      // Out of blocks or past a maximum: the operation was refused as a whole.
      const std::string m = e.what();
      ASSERT_TRUE(m.find("out of blocks") != std::string::npos || m.find("context full") != std::string::npos)
          << "step " << step << ": " << m;
      // An admission refused while writing its tail keeps the prefix it took: roll it back to what it holds.
      for (auto& [index, st] : live) st.second.resize(static_cast<size_t>(c.length(st.first)));
    }
    check_all(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (const auto& [index, st] : live) c.free_sequence(st.first);
  const auto s = c.stats();
  EXPECT_EQ(s.blocks_used, 0) << "a block leaked";
  EXPECT_EQ(s.blocks_free + s.blocks_cached, c.allocator().total_blocks());
  EXPECT_GT(s.hit_tokens, 0u);
  EXPECT_GT(s.copied_blocks, 0u);
  EXPECT_GT(s.evictions, 0u);
}

}  // namespace
}  // namespace tally
