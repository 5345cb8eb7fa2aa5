// KV cache bookkeeping: continuity and capacity checks, block accounting on
// truncate/free, store/view round trips across blocks, isolation of sequences,
// the memory plan (bytes per token, budget refusal, formatting) and the block
// allocator's reference counts.
#include <gtest/gtest.h>

#include "test_util.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/half.h"
#include "kv/block_allocator.h"
#include "kv/kv_cache.h"
#include "kv/kv_shape.h"
#include "kv/kv_storage.h"

namespace tally {
namespace {

using test::expect_error;

// 2 layers, 2 kv heads of 8, blocks of 4 positions, 20 positions in all (5 blocks).
const KvShape kShape{2, 2, 8};
constexpr int64_t kBs = 4;

KvCacheOptions options(DType type = DType::F32, int64_t n_ctx = 20) {
  return KvCacheOptions{n_ctx, kBs, type, 1u << 20};
}

TEST(KvCache, WriteMustContinueAtTheLength) {
  KvCache c(kShape, options());
  const auto s = c.create_sequence();
  c.begin_write(s, 0, 3);
  EXPECT_EQ(c.length(s), 3);
  expect_error([&] { c.begin_write(s, 2, 1); }, {"broken continuity", "position 2", "must start at 3"});
  expect_error([&] { c.begin_write(s, 4, 1); }, {"broken continuity", "must start at 3"});
  EXPECT_EQ(c.length(s), 3);  // a refused write changes nothing
  c.begin_write(s, 3, 2);
  EXPECT_EQ(c.length(s), 5);
  expect_error([&] { c.begin_write(s, 0, 1); }, {"broken continuity", "must start at 5"});
}

TEST(KvCache, WritesBeyondTheContextAreRefused) {
  KvCache c(kShape, options());
  const auto s = c.create_sequence();
  expect_error([&] { c.begin_write(s, 0, 21); }, {"context full", "20"});
  EXPECT_EQ(c.length(s), 0);
  EXPECT_EQ(c.allocator().free_blocks(), 5);  // nothing was taken by the refused write
  c.begin_write(s, 0, 20);
  EXPECT_EQ(c.allocator().free_blocks(), 0);
  expect_error([&] { c.begin_write(s, 20, 1); }, {"context full"});
  expect_error([&] { c.begin_write(s, 20, -1); }, {"cannot write -1"});
  c.begin_write(s, 20, 0);  // an empty write at the end is fine
  EXPECT_EQ(c.length(s), 20);
}

TEST(KvCache, TruncateFreesExactlyTheBlocksPastTheLength) {
  KvCache c(kShape, options());
  EXPECT_EQ(c.allocator().total_blocks(), 5);
  const auto s = c.create_sequence();
  c.begin_write(s, 0, 17);  // ceil(17 / 4) = 5 blocks
  EXPECT_EQ(c.allocator().free_blocks(), 0);
  struct Step {
    int64_t n, free_after;
  };
  for (const Step st : {Step{16, 1}, Step{13, 1}, Step{12, 2}, Step{9, 2}, Step{8, 3}, Step{1, 4}, Step{0, 5}}) {
    c.truncate(s, st.n);
    EXPECT_EQ(c.length(s), st.n);
    EXPECT_EQ(c.allocator().free_blocks(), st.free_after) << "after truncate to " << st.n;
  }
  expect_error([&] { c.truncate(s, 1); }, {"cannot truncate", "to 1"});
  c.begin_write(s, 0, 6);  // writes start over at the truncation point
  EXPECT_EQ(c.allocator().free_blocks(), 3);
  c.truncate(s, 6);  // no-op
  EXPECT_EQ(c.allocator().free_blocks(), 3);
  expect_error([&] { c.truncate(s, -1); }, {"cannot truncate"});
}

// Position p of kv head h in layer l as the attention kernel reads it.
const uint8_t* k_at(const KvLayerView& v, int64_t p, int64_t h) {
  const uint64_t vb = v.type == DType::F32 ? 4 : 2;
  return v.k_head(p / v.block_size, h) + (p % v.block_size) * v.head_dim * vb;
}
const uint8_t* v_at(const KvLayerView& v, int64_t p, int64_t h) {
  const uint64_t vb = v.type == DType::F32 ? 4 : 2;
  return v.v_head(p / v.block_size, h) + (p % v.block_size) * v.head_dim * vb;
}

// A distinct value for every (seq tag, layer, pos, head, i, k-or-v).
float value(int tag, int64_t layer, int64_t pos, int64_t h, int64_t i, bool is_v) {
  return static_cast<float>(tag * 1000 + layer * 100 + pos) * (is_v ? -1.0f : 1.0f) + 0.1f * h + 0.0123f * i;
}

void store_positions(KvCache& c, KvCache::SeqId s, int tag, int64_t from, int64_t to) {
  const int64_t nv = kShape.n_kv_head * kShape.head_dim;
  std::vector<float> k(nv), v(nv);
  for (int64_t l = 0; l < kShape.n_layer; ++l)
    for (int64_t p = from; p < to; ++p) {
      for (int64_t h = 0; h < kShape.n_kv_head; ++h)
        for (int64_t i = 0; i < kShape.head_dim; ++i) {
          k[h * kShape.head_dim + i] = value(tag, l, p, h, i, false);
          v[h * kShape.head_dim + i] = value(tag, l, p, h, i, true);
        }
      c.store(l, s, p, k.data(), v.data());
    }
}

// Every stored value reads back through view(): exactly for F32, as the
// nearest f16 (round to nearest even) for F16.
void expect_positions(const KvCache& c, KvCache::SeqId s, int tag, int64_t from, int64_t to) {
  for (int64_t l = 0; l < kShape.n_layer; ++l) {
    const KvLayerView v = c.view(l, s);
    ASSERT_EQ(v.length, c.length(s));
    for (int64_t p = from; p < to; ++p)
      for (int64_t h = 0; h < kShape.n_kv_head; ++h)
        for (int64_t i = 0; i < kShape.head_dim; ++i) {
          for (bool is_v : {false, true}) {
            const float want = value(tag, l, p, h, i, is_v);
            const float got = test::stored_value(is_v ? v_at(v, p, h) : k_at(v, p, h), i, v.type);
            const float expect = v.type == DType::F32 ? want : f16_to_f32(f32_to_f16(want));
            ASSERT_EQ(got, expect) << (is_v ? "V" : "K") << " layer " << l << " pos " << p << " head " << h
                                   << " [" << i << "]";
            if (v.type == DType::F16) {
              ASSERT_LE(std::fabs(got - want), std::fabs(want) * 0x1p-11);
            }
          }
        }
  }
}

TEST(KvCache, StoreThenViewRoundTripsAcrossBlocks) {
  for (DType type : {DType::F32, DType::F16}) {
    KvCache c(kShape, options(type));
    const auto s = c.create_sequence();
    c.begin_write(s, 0, 3);
    store_positions(c, s, 1, 0, 3);
    c.begin_write(s, 3, 7);  // positions 3..9 span blocks 0, 1 and 2
    store_positions(c, s, 1, 3, 10);
    expect_positions(c, s, 1, 0, 10);
    const KvLayerView v = c.view(1, s);
    EXPECT_EQ(v.block_size, kBs);
    EXPECT_EQ(v.n_kv_head, 2);
    EXPECT_EQ(v.head_dim, 8);
    EXPECT_EQ(v.type, type);
    expect_error([&] { store_positions(c, s, 1, 10, 11); }, {"position 10", "[0, 10)"});
  }
}

TEST(KvCache, SequencesGetDisjointBlocksAndDoNotClobberEachOther) {
  KvCache c(kShape, options(DType::F16));
  const auto a = c.create_sequence(), b = c.create_sequence();
  EXPECT_NE(a, b);
  // Interleaved growth, so that the two block tables interleave in the pool.
  c.begin_write(a, 0, 5);
  store_positions(c, a, 1, 0, 5);
  c.begin_write(b, 0, 4);
  store_positions(c, b, 2, 0, 4);
  c.begin_write(a, 5, 4);
  store_positions(c, a, 1, 5, 9);
  c.begin_write(b, 4, 3);
  store_positions(c, b, 2, 4, 7);
  const KvLayerView va = c.view(0, a), vb = c.view(0, b);
  std::set<int32_t> ids;
  for (int i = 0; i < 3; ++i) ids.insert(va.blocks[i]);  // ceil(9 / 4)
  for (int i = 0; i < 2; ++i) ids.insert(vb.blocks[i]);  // ceil(7 / 4)
  EXPECT_EQ(ids.size(), 5u) << "a block is in both tables";
  expect_positions(c, a, 1, 0, 9);
  expect_positions(c, b, 2, 0, 7);
  // A sequence freeing its blocks and another one reusing them leaves b intact.
  c.free_sequence(a);
  const auto a2 = c.create_sequence();
  c.begin_write(a2, 0, 12);
  store_positions(c, a2, 3, 0, 12);
  expect_positions(c, b, 2, 0, 7);
  expect_positions(c, a2, 3, 0, 12);
}

TEST(KvCache, FreeSequenceReturnsAllBlocks) {
  KvCache c(kShape, options());
  const auto a = c.create_sequence(), b = c.create_sequence();
  c.begin_write(a, 0, 9);
  c.begin_write(b, 0, 8);
  EXPECT_EQ(c.allocator().free_blocks(), 0);
  c.free_sequence(a);
  EXPECT_EQ(c.allocator().free_blocks(), 3);
  c.free_sequence(b);
  EXPECT_EQ(c.allocator().free_blocks(), 5);
  for (int32_t id = 0; id < 5; ++id) EXPECT_EQ(c.allocator().owners(id), 0) << id;
  expect_error([&] { c.length(a); }, {"sequence 0", "was freed"});
  expect_error([&] { c.begin_write(b, 0, 1); }, {"sequence 1", "was freed"});
  expect_error([&] { c.free_sequence(a); }, {"was freed"});
  expect_error([&] { c.view(0, KvCache::SeqId{7, 1}); }, {"no sequence 7"});
  // An entry serves a new sequence, but the freed sequence's id stays refused.
  const auto a2 = c.create_sequence();
  EXPECT_EQ(a2.index, a.index);
  EXPECT_NE(a2, a);
  expect_error([&] { c.length(a); }, {"was freed"});
  EXPECT_EQ(c.length(a2), 0);
}

TEST(KvCache, OutOfBlocksWhenSequencesShareThePool) {
  KvCache c(kShape, options());
  const auto a = c.create_sequence(), b = c.create_sequence();
  c.begin_write(a, 0, 12);  // 3 of the 5 blocks
  expect_error([&] { c.begin_write(b, 0, 9); }, {"out of blocks"});
  // A refused write changes nothing: b holds no position and no block.
  EXPECT_EQ(c.length(b), 0);
  EXPECT_EQ(c.allocator().free_blocks(), 2);
  c.begin_write(b, 0, 8);
  EXPECT_EQ(c.allocator().free_blocks(), 0);
}

TEST(KvStorage, BudgetSmallerThanThePlanFailsWithThePlannedBytes) {
  const KvShape shape{30, 3, 64};
  const uint64_t planned = KvStorage::planned_bytes(shape, 32, 128, DType::F16);
  EXPECT_EQ(planned, 23040ull * 4096);
  expect_error([&] { KvStorage(shape, 32, 128, DType::F16, planned - 1); },
               {std::to_string(planned) + " B", "budget"});
  expect_error([&] { KvCache(shape, KvCacheOptions{4096, 32, DType::F16, 1000}); }, {std::to_string(planned)});
  KvStorage fits({2, 1, 8}, 4, 2, DType::F32, KvStorage::planned_bytes({2, 1, 8}, 4, 2, DType::F32));
  EXPECT_EQ(fits.bytes(), KvStorage::planned_bytes({2, 1, 8}, 4, 2, DType::F32));
  EXPECT_EQ(fits.bytes(), 2ull * 2 * 1 * 8 * 4 * 4 * 2);
}

TEST(KvStorage, RefusesUnsupportedTypesAndShapes) {
  expect_error([&] { KvStorage({1, 1, 8}, 4, 2, DType::BF16, 1u << 20); }, {"BF16"});
  expect_error([&] { KvStorage({1, 1, 8}, 4, 2, DType::Q8_0, 1u << 20); }, {"Q8_0"});
  expect_error([&] { KvCache(kShape, KvCacheOptions{0, 4, DType::F16, 1u << 20}); }, {"context size"});
  expect_error([&] { KvCache(kShape, KvCacheOptions{16, 0, DType::F16, 1u << 20}); }, {"block size"});
}

TEST(KvPlan, BytesPerToken) {
  const KvShape smol{30, 3, 64}, qwen{36, 8, 128};
  EXPECT_EQ(kv_bytes_per_token(smol, DType::F16), 23040u);
  EXPECT_EQ(kv_bytes_per_token(smol, DType::BF16), 23040u);
  EXPECT_EQ(kv_bytes_per_token(smol, DType::F32), 46080u);
  EXPECT_EQ(kv_bytes_per_token(smol, DType::Q8_0), 12240u);  // 2 * 30 * 3 * (2 blocks * 34 B)
  EXPECT_EQ(kv_bytes_per_token(qwen, DType::BF16), 147456u);
  EXPECT_EQ(kv_bytes_per_token(qwen, DType::F16), 147456u);
  EXPECT_EQ(kv_bytes_per_token(qwen, DType::F32), 294912u);
  EXPECT_EQ(kv_bytes_per_token(qwen, DType::Q8_0), 78336u);  // 2 * 36 * 8 * (4 blocks * 34 B)
  EXPECT_EQ(kv_bytes_per_token({1, 1, 40}, DType::Q8_0), 2u * 2 * 34);  // 40 values round up to 2 blocks
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(DType::Q8_0), 34.0 / 32);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(DType::F16), 2.0);
  expect_error([] { kv_bytes_per_token({0, 3, 64}, DType::F16); }, {"layers 0"});
  expect_error([] { kv_bytes_per_token({30, 3, -1}, DType::F16); }, {"head_dim -1"});
}

TEST(KvPlan, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1024 B (1.00 KiB)");
  EXPECT_EQ(format_bytes(147456), "147456 B (144.00 KiB)");
  EXPECT_EQ(format_bytes(1572864), "1572864 B (1.50 MiB)");
  EXPECT_EQ(format_bytes(23040ull * 4096), "94371840 B (90.00 MiB)");
  EXPECT_EQ(format_bytes(3ull << 30), "3221225472 B (3.00 GiB)");
  EXPECT_EQ(format_bytes(5ull << 40), "5497558138880 B (5.00 TiB)");
  // three significant digits, and never "1000 KiB"
  EXPECT_EQ(format_bytes_short(999), "999 B");
  EXPECT_EQ(format_bytes_short(1000), "0.98 KiB");
  EXPECT_EQ(format_bytes_short(1472), "1.44 KiB");
  EXPECT_EQ(format_bytes_short(98362432), "93.8 MiB");
  EXPECT_EQ(format_bytes_short(491400064), "469 MiB");
  EXPECT_EQ(format_bytes_short(1117320768), "1.04 GiB");
}

TEST(BlockAllocator, ReferenceCounts) {
  BlockAllocator a(3);
  EXPECT_EQ(a.total_blocks(), 3);
  EXPECT_EQ(a.free_blocks(), 3);
  std::set<int32_t> ids;
  for (int i = 0; i < 3; ++i) {
    const auto id = a.allocate();
    ASSERT_TRUE(id.has_value());
    EXPECT_GE(*id, 0);
    EXPECT_LT(*id, 3);
    EXPECT_EQ(a.owners(*id), 1);
    ids.insert(*id);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_FALSE(a.allocate().has_value());
  EXPECT_EQ(a.free_blocks(), 0);

  a.retain(1);  // shared by two owners
  EXPECT_EQ(a.owners(1), 2);
  a.release(1);
  EXPECT_EQ(a.owners(1), 1);
  EXPECT_EQ(a.free_blocks(), 0);  // still owned
  a.release(1);
  EXPECT_EQ(a.owners(1), 0);
  EXPECT_EQ(a.free_blocks(), 1);
  expect_error([&] { a.release(1); }, {"block 1", "released twice"});
  expect_error([&] { a.retain(1); }, {"block 1", "free"});
  expect_error([&] { a.release(3); }, {"id 3", "3 blocks"});
  expect_error([&] { a.retain(-1); }, {"id -1"});
  expect_error([&] { a.owners(99); }, {"id 99"});
  EXPECT_EQ(a.allocate(), std::optional<int32_t>(1));  // the freed block is reused
  EXPECT_EQ(a.owners(1), 1);
}

}  // namespace
}  // namespace tally
