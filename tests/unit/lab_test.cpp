// The lab's experiments: formulas against the seeds' figures, instrumented
// counts against the formulas, and the invariance / continuity / encoder
// experiments on a tiny synthetic decoder (fast, run under sanitizers) and on
// the real model.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "kv/kv_storage.h"
#include "lab/causal_experiment.h"
#include "lab/continuity.h"
#include "lab/score_count.h"
#include "model_test_support.h"
#include "runtime/embedder.h"
#include "runtime/session.h"
#include "tiny_model.h"

using namespace tally;

namespace {
std::vector<int32_t> some_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
  return t;
}
}  // namespace

TEST(LabScores, FormulasReproduceTheSeedsFigures) {
  EXPECT_EQ(score_formulas(100).recompute_formula, 338350u);
  EXPECT_EQ(score_formulas(100).cached_formula, 5050u);
  EXPECT_EQ(score_formulas(1000).recompute_formula, 333833500u);
  EXPECT_EQ(score_formulas(1000).cached_formula, 500500u);
  EXPECT_THROW(score_formulas(0), Error);
  EXPECT_THROW(score_formulas(-5), Error);
}

TEST(LabScores, InstrumentedKernelCountsEqualTheFormulas) {
  auto t = test::make_tiny_model();
  for (int64_t n : {1, 2, 7, 20}) {
    EXPECT_EQ(measure_scores(*t->model, 3, n, true, 1), triangular(n)) << n;
    EXPECT_EQ(measure_scores(*t->model, 3, n, false, 2), sum_of_squares(n)) << n;
  }
}

TEST(LabCausal, MaskKeepsEarlierOutputsAndNoMaskChangesThemFromLayerOne) {
  test::TinySpec spec;
  spec.n_layer = 3;
  auto t = test::make_tiny_model(spec);
  const auto ids = some_tokens(9, spec.n_vocab);
  const CausalReport r = run_causal_experiment(*t->model, ids, 1);
  EXPECT_EQ(r.n_tokens, 8);
  EXPECT_LE(r.masked_max_diff, 1e-6);
  EXPECT_GT(r.unmasked_max_diff, 1e-3);
  ASSERT_EQ(r.per_layer.size(), 3u);
  for (const auto& L : r.per_layer) {
    EXPECT_LE(std::max(L.masked_k, L.masked_v), 1e-6) << "layer " << L.layer;
  }
  // Layer 0's K/V come from the embeddings alone; every later layer reads attention outputs.
  EXPECT_EQ(r.per_layer[0].unmasked_k, 0);
  EXPECT_EQ(r.per_layer[0].unmasked_v, 0);
  EXPECT_GT(r.per_layer[1].unmasked_k, 1e-4);
  EXPECT_GT(r.per_layer[2].unmasked_v, 1e-4);
}

TEST(LabContinuity, WrongStartsAreRefusedAndAnEditRecomputesOnlyFromIt) {
  auto t = test::make_tiny_model();
  const auto ids = some_tokens(12, t->spec.n_vocab);
  const ContinuityReport r = run_continuity_experiment(*t->model, ids, 5, 1, 1);
  EXPECT_TRUE(r.stale_start_refused);
  EXPECT_TRUE(r.gap_start_refused);
  EXPECT_NE(r.refusal_message.find("broken continuity"), std::string::npos);
  EXPECT_EQ(r.recomputed_positions, 7);
  EXPECT_EQ(r.fresh_positions, 12);
  EXPECT_LE(r.max_logit_diff, 1e-5);
  EXPECT_NEAR(r.work_saved, 5.0 / 12.0, 1e-12);
  EXPECT_THROW(run_continuity_experiment(*t->model, ids, 12, 1, 1), Error);
}

TEST(LabEmbed, OnePassAllocatesNoKvCache) {
  auto t = test::make_tiny_model();
  const auto ids = some_tokens(10, t->spec.n_vocab);
  const uint64_t before = KvStorage::constructed();
  const Embedding e = embed(*t->model, ids, -1, Pooling::None, 2);
  EXPECT_EQ(KvStorage::constructed(), before) << "embed built a KV cache";
  EXPECT_EQ(e.rows, 10);
  EXPECT_EQ(e.dim, t->spec.n_embd);

  // Same hidden states as the cached path (f32 cache: no rounding of K/V).
  SessionOptions o;
  o.n_ctx = 16;
  o.cache_type = DType::F32;
  Session s(*t->model, o);
  s.append(ids);
  for (int64_t i = 0; i < e.rows * e.dim; ++i) ASSERT_NEAR(e.values[i], s.hidden()[i], 1e-6) << i;

  const Embedding mean = embed(*t->model, ids, -1, Pooling::Mean, 1);
  const Embedding last = embed(*t->model, ids, -1, Pooling::Last, 1);
  ASSERT_EQ(mean.rows, 1);
  for (int64_t i = 0; i < e.dim; ++i) {
    double m = 0;
    for (int64_t r = 0; r < e.rows; ++r) m += e.values[r * e.dim + i];
    EXPECT_NEAR(mean.values[i], m / e.rows, 1e-5);
    EXPECT_EQ(last.values[i], e.values[(e.rows - 1) * e.dim + i]);
  }
  const Embedding layer0 = embed(*t->model, ids, 0, Pooling::Last, 1);  // the token embedding itself
  std::vector<float> row(e.dim);
  t->model->embed(ids.back(), row.data());
  for (int64_t i = 0; i < e.dim; ++i) EXPECT_EQ(layer0.values[i], row[i]);
  EXPECT_THROW(embed(*t->model, ids, t->spec.n_layer + 1, Pooling::Mean, 1), Error);
  EXPECT_THROW(pooling_from_name("max"), Error);
}

TEST(ModelLab, CausalInvarianceOnTheRealModel) {
  TALLY_NEED_MODEL();
  const auto ids = tally_test::shared_tokenizer().encode("The cache keeps the keys and values of earlier tokens", false, false);
  const CausalReport r = run_causal_experiment(*tally_test::shared_model(), ids, 0);
  std::printf("masked %.3g (relative %.3g), unmasked %.3g (relative %.3g)\n", r.masked_max_diff, r.masked_max_relative,
              r.unmasked_max_diff, r.unmasked_max_relative);
  EXPECT_LT(r.masked_max_relative, 1e-4);
  EXPECT_GT(r.unmasked_max_relative, 1e-2);
  EXPECT_EQ(r.per_layer[0].unmasked_k, 0);
  EXPECT_GT(r.per_layer[1].unmasked_k, 1e-3);
}

TEST(ModelLab, InstrumentedScoreCountsOnTheRealModel) {
  TALLY_NEED_MODEL();
  const int64_t n = 12;
  EXPECT_EQ(measure_scores(*tally_test::shared_model(), 504, n, true, 0), triangular(n));
  EXPECT_EQ(measure_scores(*tally_test::shared_model(), 504, n, false, 0), sum_of_squares(n));
}
