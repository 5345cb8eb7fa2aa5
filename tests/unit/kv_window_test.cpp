// Sliding-window layers in the KV cache: their K/V live in a pool of window
// slots sized for a window and a step per sequence, not the context. Checked:
// the pool's size and bytes; every position a window layer must still hold
// reads back what was stored, at any length; slots go only when the pool runs
// dry and never from a window range; truncate, fork, copy-on-write, the prefix
// cache and moved positions (a stream's slide) keep those promises, and
// running out is one clear error that changes nothing; the count of blocks
// writes can take, kept as slots and holders change, equals a recount.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "core/error.h"
#include "kv/kv_storage.h"
#include "kv/window_slots.h"
#include "test_util.h"

namespace tally {
namespace {

using test::expect_error;

// Layer 0 slides (a window of 8), layer 1 is global; 1 kv head of 4, blocks of 4, 64 positions (16 blocks).
const KvShape kShape{2, 1, 4};
constexpr int64_t kWindow = 8;

KvCacheOptions windowed(int64_t max_sequences = 1, bool prefix_cache = false, int64_t n_ctx = 64) {
  KvCacheOptions o;
  o.n_ctx = n_ctx;
  o.block_size = 4;
  o.type = DType::F32;
  o.budget_bytes = 1u << 20;
  o.prefix_cache = prefix_cache;
  o.window = kWindow;
  o.window_layers = {true, false};
  o.max_sequences = max_sequences;
  o.max_batch = 4;
  return o;
}

// The value stored at position p of layer l for a sequence tagged `tag`.
float value(int64_t p, int64_t l, int tag = 0) { return static_cast<float>(p + 1000 * l + 100000 * tag); }

// Writes positions [from, to) one at a time (token id = position), as decoding does.
void write(KvCache& c, KvCache::SeqId s, int64_t from, int64_t to, int tag = 0) {
  for (int64_t p = from; p < to; ++p) {
    const int32_t tok = static_cast<int32_t>(p);
    c.begin_write(s, p, std::span<const int32_t>(&tok, 1));
    for (int64_t l = 0; l < 2; ++l) {
      const float k[4] = {value(p, l, tag), 1, 2, 3}, v[4] = {-value(p, l, tag), 0, 0, 0};
      c.store(l, s, p, k, v);
    }
    c.end_write(s);
  }
}

float key_at(const KvCache& c, int64_t l, KvCache::SeqId s, int64_t p) {
  float k[4], v[4];
  c.load(l, s, p, k, v);
  EXPECT_EQ(v[0], -k[0]) << "layer " << l << " position " << p;
  return k[0];
}

// What a write at the sequence's length reads: the window layer's last
// window - 1 positions, and every position of the global layer.
void expect_window_intact(const KvCache& c, KvCache::SeqId s, const std::function<int(int64_t)>& tag) {
  const int64_t n = c.length(s);
  for (int64_t p = std::max<int64_t>(0, n - kWindow + 1); p < n; ++p) {
    ASSERT_TRUE(c.holds(0, s, p)) << p;
    EXPECT_EQ(key_at(c, 0, s, p), value(p, 0, tag(p))) << "window layer, position " << p;
  }
  for (int64_t p = 0; p < n; ++p) EXPECT_EQ(key_at(c, 1, s, p), value(p, 1, tag(p))) << "global layer, position " << p;
}

TEST(KvWindow, ThePoolHoldsAWindowAndAStepPerSequence) {
  KvCache c(kShape, windowed());
  // (8 + 3) / 4 + 2 = 4 blocks for the window range and the block written, 1 for a step of 4.
  EXPECT_EQ(c.stats().window_slots, 5);
  EXPECT_EQ(c.storage().bytes(), KvStorage::planned_bytes(kShape, 4, 16, DType::F32, 1, 5));
  EXPECT_EQ(c.storage().bytes(), 2u * (16 + 5) * 4 * 4 * 4);  // K and V, (16 + 5) layer-blocks of 4 x 4 floats
  EXPECT_EQ(kv_cache_planned_bytes(kShape, windowed()), c.storage().bytes());  // what kv-plan shows
  const auto s = c.create_sequence();
  write(c, s, 0, 60);
  EXPECT_LE(c.stats().window_slots_used, 5);
  expect_window_intact(c, s, [](int64_t) { return 0; });
  EXPECT_FALSE(c.holds(0, s, 0));
  EXPECT_TRUE(c.holds(1, s, 0));
  expect_error([&] { key_at(c, 0, s, 0); }, {"sliding-window layer 0", "taken back"});
  // Without window layers nothing changes: one pool, every layer holds every position.
  KvCacheOptions plain = windowed();
  plain.window_layers = {false, false};
  EXPECT_EQ(KvCache(kShape, plain).stats().window_slots, 0);
}

TEST(KvWindow, ATruncateBehindTheWindowIsRefusedAndResumePointSaysWhere) {
  KvCache c(kShape, windowed());
  const auto s = c.create_sequence();
  write(c, s, 0, 40);
  EXPECT_EQ(c.resume_point(s, 40), 40);
  EXPECT_EQ(c.resume_point(s, 38), 38);  // its window range is still there
  const int64_t m = c.resume_point(s, 20);
  EXPECT_LT(m, 20);
  expect_error([&] { c.truncate(s, 20); }, {"cannot truncate sequence", "no longer hold", std::to_string(m)});
  EXPECT_EQ(c.length(s), 40);  // refused: nothing changed
  c.truncate(s, 38);
  write(c, s, 38, 50, 1);
  expect_window_intact(c, s, [](int64_t p) { return p < 38 ? 0 : 1; });
  const int64_t back = c.resume_point(s, 20);
  c.truncate(s, back);
  write(c, s, back, 30, 2);
  expect_window_intact(c, s, [&](int64_t p) { return p < back ? 0 : 2; });
}

TEST(KvWindow, ForksKeepTheirOwnWindows) {
  KvCache c(kShape, windowed(2, false, 256));
  EXPECT_EQ(c.stats().window_slots, 9);
  const auto a = c.create_sequence();
  write(c, a, 0, 10);  // a partly filled block: both writers copy it
  const auto b = c.fork(a);
  for (int64_t p = 10; p < 40; ++p) {
    write(c, a, p, p + 1, 1);
    write(c, b, p, p + 1, 2);
  }
  expect_window_intact(c, a, [](int64_t p) { return p < 10 ? 0 : 1; });
  expect_window_intact(c, b, [](int64_t p) { return p < 10 ? 0 : 2; });
  // A layer's block: 4 positions of 4 floats, K and V. The shared block was in
  // the window: each copy moved both layers.
  constexpr uint64_t kLayerBlock = 2 * 4 * 4 * sizeof(float);
  const KvCacheStats before = c.stats();
  EXPECT_GE(before.copied_blocks, 1u);
  EXPECT_EQ(before.copied_bytes, before.copied_blocks * 2 * kLayerBlock);
  const auto copy = c.fork_copy(a);
  // A full copy: every block's global layer, and the window layer where a's blocks hold a slot.
  const KvCacheStats after = c.stats();
  EXPECT_EQ(after.copied_blocks - before.copied_blocks, 10u);
  EXPECT_EQ(after.copied_bytes - before.copied_bytes,
            (10 + static_cast<uint64_t>(after.window_slots_used - before.window_slots_used)) * kLayerBlock);
  write(c, copy, 40, 44, 3);
  expect_window_intact(c, copy, [](int64_t p) { return p < 10 ? 0 : p < 40 ? 1 : 3; });
  expect_window_intact(c, a, [](int64_t p) { return p < 10 ? 0 : 1; });
}

TEST(KvWindow, APrefixIsTakenOnlyWhereItsWindowIsStillHeld) {
  KvCache c(kShape, windowed(2, true));
  const auto a = c.create_sequence();
  write(c, a, 0, 40);  // 10 blocks through 9 slots: the first ones lose theirs
  std::vector<int32_t> tokens(40);
  for (int32_t i = 0; i < 40; ++i) tokens[static_cast<size_t>(i)] = i;
  // 39 positions (the 10 blocks that hold them): their window range [32, 39) is held.
  const auto b = c.create_sequence_from_prefix(tokens, 39);
  EXPECT_EQ(c.length(b), 39);
  expect_window_intact(c, b, [](int64_t) { return 0; });
  // 20 positions: [13, 20) lost its slots, and so did every shorter prefix's window.
  const auto d = c.create_sequence_from_prefix(std::span<const int32_t>(tokens).first(20), 20);
  EXPECT_EQ(c.length(d), 0);
  EXPECT_EQ(c.probe_prefix(std::span<const int32_t>(tokens).first(20), 20).positions, 0);
  write(c, d, 0, 20, 4);
  expect_window_intact(c, d, [](int64_t) { return 4; });
}

TEST(KvWindow, MovedPositionsTakeTheirWindowAlong) {
  KvCache c(kShape, windowed());
  const auto s = c.create_sequence();
  write(c, s, 0, 40);
  // A stream's slide: keep 4 sinks, drop 8, move the rest down.
  c.remove_positions(s, 4, 8, [](int64_t, float*) {});
  ASSERT_EQ(c.length(s), 32);
  const int64_t n = c.length(s);
  for (int64_t p = n - kWindow + 1; p < n; ++p) EXPECT_EQ(key_at(c, 0, s, p), value(p + 8, 0)) << p;
  for (int64_t p = 0; p < n; ++p) EXPECT_EQ(key_at(c, 1, s, p), value(p < 4 ? p : p + 8, 1)) << p;
  EXPECT_FALSE(c.holds(0, s, 4));  // its block now holds positions moved from where no slot was
  write(c, s, 32, 36, 5);
  for (int64_t p = 36 - kWindow + 1; p < 36; ++p) EXPECT_EQ(key_at(c, 0, s, p), p < 32 ? value(p + 8, 0) : value(p, 0, 5));
}

TEST(KvWindow, RunningOutOfSlotsIsOneClearErrorThatChangesNothing) {
  KvCache c(kShape, windowed());  // sized for one sequence: 5 slots
  const auto a = c.create_sequence(), b = c.create_sequence();
  write(c, a, 0, 8);
  write(c, b, 0, 4);
  // a's window range and the block it writes hold 2 + 1 blocks; b holds 1: one slot is left.
  const std::vector<int32_t> toks(12, 1);
  expect_error([&] { c.begin_write(b, 4, toks); }, {"out of window slots", "sequence"});
  EXPECT_EQ(c.length(b), 4);
  expect_window_intact(c, b, [](int64_t) { return 0; });
}

// Many sequences writing, forking, copying, taking cached prefixes,
// truncating, sliding and freeing in a window pool too small for all of
// them: after every step each block's holders are exactly the live sequences
// whose window range contains it, every window range has its slots, and
// available_blocks() (two counts kept as they change) equals a recount over
// every block of the pool.
TEST(KvWindow, AvailableBlocksEqualsARecountAfterEveryStep) {
  KvCache c(kShape, windowed(3, true, 128));  // 32 blocks of 4, 3 x (2 + 2) + 1 = 13 slots
  std::mt19937 rng(3);
  std::map<int32_t, KvCache::SeqId> live;
  auto pick = [&]() -> KvCache::SeqId {
    auto it = live.begin();
    std::advance(it, static_cast<long>(rng() % live.size()));
    return it->second;
  };
  const int64_t bs = c.block_size(), total = c.allocator().total_blocks();
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 9);
    try {
      if (op == 0 || live.empty()) {  // a cached prefix of tokens 0, 1, 2, ... (write() stores token = position)
        std::vector<int32_t> t(static_cast<size_t>(rng() % 40 + 1));
        for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
        const auto s = c.create_sequence_from_prefix(t, static_cast<int64_t>(t.size()) - 1);
        live[s.index] = s;
      } else if (op == 1) {
        const auto s = c.fork(pick());
        live[s.index] = s;
      } else if (op == 2) {
        const auto s = c.fork_copy(pick());
        live[s.index] = s;
      } else if (op <= 4) {
        const auto s = pick();
        write(c, s, c.length(s), c.length(s) + static_cast<int64_t>(rng() % 6 + 1));
      } else if (op == 5) {
        const auto s = pick();
        c.truncate(s, c.resume_point(s, static_cast<int64_t>(rng() % static_cast<uint64_t>(c.length(s) + 1))));
      } else if (op == 6) {
        const auto s = pick();
        if (c.length(s) > 2 * bs + 2) c.remove_positions(s, 2, bs, [](int64_t, float*) {});
      } else if (op == 7) {
        c.trim_window(pick());
      } else {
        const auto s = pick();
        c.free_sequence(s);
        live.erase(s.index);
      }
    } catch (const Error& e) {
      const std::string m = e.what();
      ASSERT_TRUE(m.find("out of") != std::string::npos || m.find("context full") != std::string::npos ||
                  m.find("no longer hold") != std::string::npos)
          << "step " << step << ": " << m;
    }
    std::vector<int32_t> holders(static_cast<size_t>(total), 0);
    for (const auto& [index, s] : live) {
      const int64_t n = c.length(s);
      const KvLayerView global = c.view(1, s);
      for (int64_t i = std::max<int64_t>(0, n + 1 - kWindow) / bs; i < (n + bs - 1) / bs; ++i) ++holders[global.blocks[i]];
      for (int64_t p = std::max<int64_t>(0, n - kWindow + 1); p < n; ++p)
        ASSERT_TRUE(c.holds(0, s, p)) << "step " << step << ": sequence " << index << " lost position " << p;
    }
    const WindowSlots& w = c.window_slots();
    int64_t reclaimable = 0;
    for (int32_t b = 0; b < total; ++b) {
      ASSERT_EQ(w.holders(b), holders[static_cast<size_t>(b)]) << "step " << step << ", block " << b;
      reclaimable += w.slot(b) >= 0 && holders[static_cast<size_t>(b)] == 0;
    }
    ASSERT_EQ(w.reclaimable_slots(), reclaimable) << "step " << step;
    ASSERT_EQ(c.available_blocks(), std::min(c.allocator().available_blocks(), w.free_slots() + reclaimable))
        << "step " << step;
  }
  EXPECT_GT(c.stats().hit_tokens, 0u);
  EXPECT_GT(c.stats().copied_blocks, 0u);
}

}  // namespace
}  // namespace tally
