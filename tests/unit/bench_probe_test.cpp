// The benchmark's op counting: what the probe's loops do per iteration, how a
// rate is made from it, and the 8-bit multiply-adds of a prefill (each weight
// value x each token = one, the output matrix for the last token only).
// No test here times anything.
#include <gtest/gtest.h>

#include "bench/benchmark.h"
#include "bench/machine_probe.h"
#include "bench/peak_loops.h"
#include "tiny_model.h"

using namespace tally;

// From the instructions, not from the probe's constants: each i32 lane of a
// 256-bit vpmaddubsw+vpmaddwd or vpdpbusd sums 4 u8 x s8 products (8 lanes:
// 32 per instruction), a 512-bit vpdpbusd has 16 such lanes (64); the loops
// run 6, 12 and 16 independent chains (peak_loops_*.cpp).
TEST(BenchProbe, Int8LoopWorkIsChainsTimesLanes) {
  EXPECT_EQ(int8_macs_per_iteration(Int8Kind::Avx2Maddubs), 6 * 8 * 4);
  EXPECT_EQ(int8_macs_per_iteration(Int8Kind::Vnni256), 12 * 8 * 4);
  EXPECT_EQ(int8_macs_per_iteration(Int8Kind::Vnni512), 16 * 16 * 4);
}

TEST(BenchProbe, Int8KindFollowsTheKernelLevel) {
  EXPECT_EQ(int8_kind_for(SimdLevel::Avx2), Int8Kind::Avx2Maddubs);
  EXPECT_EQ(int8_kind_for(SimdLevel::Avx2Vnni), Int8Kind::Vnni256);
  EXPECT_EQ(int8_kind_for(SimdLevel::Avx512Vnni), Int8Kind::Vnni512);
  EXPECT_EQ(int8_kind_for(SimdLevel::Scalar), Int8Kind::Scalar);
  EXPECT_STREQ(int8_kind_name(Int8Kind::Avx2Maddubs), "vpmaddubsw+vpmaddwd 256-bit");
  EXPECT_STREQ(int8_kind_name(Int8Kind::Vnni512), "vpdpbusd 512-bit");
}

TEST(BenchProbe, RatesCountTwoOpsPerMultiplyAdd) {
  // 2 threads x 1e6 iterations x 256 multiply-adds in 0.1 s = 5.12e9 MAC/s = 10.24 GOP/s.
  EXPECT_DOUBLE_EQ(giga_ops_per_second(2, 1'000'000, 256, 0.1), 10.24);
  EXPECT_DOUBLE_EQ(giga_ops_per_second(1, 1'000'000, 256, 0), 0);
}

TEST(BenchProbe, PrefillCountsEachWeightTimesEachTokenAndTheOutputOnce) {
  test::TinySpec spec;
  spec.matrix_type = DType::Q8_0;
  auto q8 = test::make_tiny_model(spec);
  const int64_t E = spec.n_embd, F = spec.n_ff, H = spec.n_head * spec.head_dim,
                KV = spec.n_kv_head * spec.head_dim;
  const uint64_t layer = E * H + 2 * E * KV + H * E + 2 * E * F + F * E;
  const uint64_t output = static_cast<uint64_t>(spec.n_vocab * E);
  ASSERT_EQ(q8->model->output().type, DType::Q8_0);
  EXPECT_EQ(prefill_matmul_macs(*q8->model, 1, false), layer * spec.n_layer + output);
  EXPECT_EQ(matmul_macs_per_token(*q8->model), layer * spec.n_layer + output);
  EXPECT_EQ(prefill_matmul_macs(*q8->model, 10, true), 10 * layer * spec.n_layer + output);
  EXPECT_EQ(prefill_matmul_macs(*q8->model, 0, true), 0u);

  // f32 matrices run in floating point: no 8-bit products to count.
  auto f32 = test::make_tiny_model();
  EXPECT_EQ(prefill_matmul_macs(*f32->model, 10, true), 0u);
  EXPECT_EQ(prefill_matmul_macs(*f32->model, 10, false), 10 * layer * spec.n_layer + output);
}

TEST(BenchProbe, OnlyTheIntegerFormatsRunAsInt8) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K})
    EXPECT_TRUE(runs_as_int8(t));
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_FALSE(runs_as_int8(t));
}

TEST(BenchProbe, PrefillIsMeasuredAgainstThePeakItsArithmeticRunsAt) {
  BenchRow pp;
  pp.test = "pp512";
  pp.pct_limit = 185;      // of the f32 FMA peak: flattering, the products are int8
  pp.pct_int8_peak = 46;   // of the int8 peak
  pp.int8_ops_per_token = 1e9;
  EXPECT_EQ(limit_summary(pp), "46% of int8 peak");
  pp.int8_ops_per_token = 0;  // float weights: their products are FMAs
  EXPECT_EQ(limit_summary(pp), "185% of FMA peak");
  BenchRow tg;
  tg.test = "tg128";
  tg.pct_limit = 71;
  EXPECT_EQ(limit_summary(tg), "71% of read bandwidth");
  tg.pct_limit = 0;  // --no-probe
  EXPECT_EQ(limit_summary(tg), "");
}
