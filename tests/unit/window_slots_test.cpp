// The window layers' slot pool on its own (kv/window_slots.h): slots lent to
// blocks, holders, reclaiming only slots whose block no window range holds,
// and counts that equal a recount after every step of a random run.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "kv/window_slots.h"
#include "test_util.h"

namespace tally {
namespace {

using test::expect_error;

TEST(WindowSlots, ABlockKeepsItsSlotUntilReleased) {
  WindowSlots w(2, 5);
  EXPECT_EQ(w.total_slots(), 2);
  EXPECT_EQ(w.free_slots(), 2);
  EXPECT_EQ(w.slot(3), -1);
  const auto a = w.allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(w.allocate(3), a) << "a block has one slot";
  const auto b = w.allocate(1);
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(w.allocate(4), std::nullopt) << "no slot is free";
  EXPECT_EQ(w.used_slots(), 2);
  w.release(3);
  EXPECT_EQ(w.slot(3), -1);
  w.release(3);  // releasing a block without a slot changes nothing
  EXPECT_EQ(w.free_slots(), 1);
  EXPECT_EQ(w.allocate(4), a) << "the released slot serves another block";
  expect_error([&] { w.allocate(5); }, {"id 5", "5 blocks"});
  expect_error([&] { w.unhold(0); }, {"block 0", "no sequence's window"});
}

TEST(WindowSlots, OnlySlotsOfBlocksNoWindowHoldsAreReclaimed) {
  WindowSlots w(4, 6);
  for (int32_t b : {0, 1, 2, 3}) ASSERT_TRUE(w.allocate(b).has_value());
  EXPECT_EQ(w.reclaimable_slots(), 4) << "lent, held by none";
  w.hold(1);
  w.hold(3);
  w.hold(3);  // two sequences' window ranges
  w.hold(5);  // a held block without a slot counts for nothing
  EXPECT_EQ(w.reclaimable_slots(), 2);
  EXPECT_EQ(w.available_slots(), 2);
  w.unhold(3);
  EXPECT_EQ(w.reclaimable_slots(), 2) << "block 3 is still in one window range";
  EXPECT_EQ(w.reclaim(), 2);
  EXPECT_EQ(w.slot(0), -1);
  EXPECT_EQ(w.slot(2), -1);
  EXPECT_GE(w.slot(1), 0);
  EXPECT_GE(w.slot(3), 0);
  EXPECT_EQ(w.free_slots(), 2);
  EXPECT_EQ(w.reclaim(), 0);
  w.unhold(1);
  EXPECT_EQ(w.reclaimable_slots(), 1);
  EXPECT_EQ(w.available_slots(), 3);
}

// Random lending, releasing, holding and reclaiming: the counts always equal
// a recount, and no slot is lent twice.
TEST(WindowSlots, CountsEqualARecountAfterEveryStep) {
  constexpr int64_t kSlots = 7, kBlocks = 20;
  WindowSlots w(kSlots, kBlocks);
  std::mt19937 rng(5);
  std::vector<int32_t> holds(kBlocks, 0);
  for (int step = 0; step < 5000; ++step) {
    const int32_t b = static_cast<int32_t>(rng() % kBlocks);
    switch (rng() % 6) {
      case 0:
      case 1: {
        const bool had = w.slot(b) >= 0, some_free = w.free_slots() > 0;
        ASSERT_EQ(w.allocate(b).has_value(), had || some_free) << "step " << step;
        break;
      }
      case 2: w.release(b); break;
      case 3:
        w.hold(b);
        ++holds[b];
        break;
      case 4:
        if (holds[b] > 0) {
          w.unhold(b);
          --holds[b];
        }
        break;
      default:
        if (rng() % 4 == 0) w.reclaim();
    }
    int64_t lent = 0, reclaimable = 0;
    std::set<int32_t> slots;
    for (int32_t i = 0; i < kBlocks; ++i) {
      ASSERT_EQ(w.holders(i), holds[i]);
      if (w.slot(i) < 0) continue;
      ++lent;
      reclaimable += holds[i] == 0;
      ASSERT_TRUE(slots.insert(w.slot(i)).second) << "slot " << w.slot(i) << " lent twice, step " << step;
      ASSERT_LT(w.slot(i), kSlots);
    }
    ASSERT_EQ(w.used_slots(), lent) << "step " << step;
    ASSERT_EQ(w.free_slots(), kSlots - lent) << "step " << step;
    ASSERT_EQ(w.reclaimable_slots(), reclaimable) << "step " << step;
    ASSERT_EQ(w.available_slots(), kSlots - lent + reclaimable) << "step " << step;
  }
}

}  // namespace
}  // namespace tally
