// What the causal mask promises, checked on the real model: earlier outputs
// never change when a token is added, so a cache reused across steps, chunks
// and edits gives what recomputing from scratch gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model_test_support.h"
#include "runtime/generator.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "runtime/session.h"

using namespace tally;
using tally_test::shared_model;

namespace {

const std::vector<int32_t>& prompt_ids() {
  static const std::vector<int32_t> ids = tally_test::shared_tokenizer().encode(
      "A key-value cache stores the keys and values of earlier tokens so that each new token", false, false);
  return ids;
}

Session make_session(int64_t batch = 512, bool all = true) {
  SessionOptions o;
  o.n_ctx = 256;
  o.n_batch = batch;
  o.all_logits = all;
  return Session(*shared_model(), o);
}

std::vector<float> logits_of(Session& s, const std::vector<int32_t>& ids) {
  const int64_t V = shared_model()->config().n_vocab;
  std::vector<float> out;
  s.append(ids, [&](int64_t, const float* l, int64_t rows) { out.insert(out.end(), l, l + rows * V); });
  return out;
}

float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(ModelInvariants, AppendingATokenLeavesEarlierLogitsUnchanged) {
  TALLY_NEED_MODEL();
  auto ids = prompt_ids();
  Session a = make_session();
  const auto short_run = logits_of(a, ids);
  ids.push_back(1000);
  Session b = make_session();
  const auto long_run = logits_of(b, ids);
  const float d = max_abs_diff(short_run.data(), long_run.data(), short_run.size());
  std::printf("max |diff| of the first %zu positions' logits: %g\n", ids.size() - 1, d);
  EXPECT_LE(d, 1e-5f);
}

TEST(ModelInvariants, ChunkedPrefillEqualsOneShot) {
  TALLY_NEED_MODEL();
  Session one = make_session(512);
  Session chunked = make_session(5);
  const auto a = logits_of(one, prompt_ids());
  const auto b = logits_of(chunked, prompt_ids());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(max_abs_diff(a.data(), b.data(), a.size()), 1e-5f);
}

TEST(ModelInvariants, CacheAndNoCacheGiveIdenticalGreedyTokens) {
  TALLY_NEED_MODEL();
  GenerateOptions g;
  g.max_tokens = 32;
  g.sampling.temperature = 0;
  Session s1 = make_session(512, false);
  const auto cached = generate(s1, prompt_ids(), g);
  g.use_cache = false;
  Session s2 = make_session(512, false);
  const auto recomputed = generate(s2, prompt_ids(), g);
  EXPECT_EQ(cached.tokens, recomputed.tokens);
  EXPECT_EQ(cached.tokens.size(), 32u);
}

TEST(ModelInvariants, TruncateThenRecomputeEqualsFreshRun) {
  TALLY_NEED_MODEL();
  const auto& ids = prompt_ids();
  const size_t keep = 7;  // an edit at token 7: positions >= 7 are stale
  std::vector<int32_t> edited(ids.begin(), ids.begin() + keep);
  edited.push_back(4000);
  edited.push_back(42);

  Session s = make_session();
  s.append(ids);
  s.truncate(keep);
  const std::vector<int32_t> tail(edited.begin() + keep, edited.end());
  const int64_t V = shared_model()->config().n_vocab;
  std::vector<float> rolled;
  s.append(tail, [&](int64_t, const float* l, int64_t rows) { rolled.insert(rolled.end(), l, l + rows * V); });

  Session fresh = make_session();
  const auto full = logits_of(fresh, edited);
  ASSERT_EQ(rolled.size(), tail.size() * V);
  EXPECT_LE(max_abs_diff(rolled.data(), full.data() + keep * V, rolled.size()), 1e-5f);
  EXPECT_EQ(s.tokens(), edited);
}

TEST(ModelInvariants, WriteAtWrongPositionIsRefused) {
  TALLY_NEED_MODEL();
  const auto& c = shared_model()->config();
  const auto ids = prompt_ids();
  const int64_t n = static_cast<int64_t>(ids.size());
  ThreadPool pool(2);
  KvCache cache({c.n_layer, c.n_kv_head, c.head_dim}, KvCacheOptions{n + 8, 32, DType::F16, 0});
  Forward f(*shared_model(), pool, n, n + 8, 1);
  const KvCache::SeqId seq = cache.create_sequence();
  f.eval(cache, seq, ids, 0, LogitsMode::Last);
  const int32_t tok = 42;
  for (int64_t wrong : {n - 1, n + 1}) {
    try {
      f.eval(cache, seq, std::span<const int32_t>(&tok, 1), wrong, LogitsMode::Last);
      FAIL() << "a write at position " << wrong << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken continuity"), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache.length(seq), n);  // nothing was written
  }
}

TEST(ModelInvariants, SameSeedSameTextAndSeedsDiffer) {
  TALLY_NEED_MODEL();
  GenerateOptions g;
  g.max_tokens = 16;
  g.sampling.temperature = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0;
  g.sampling.seed = 7;
  Session a = make_session(512, false), b = make_session(512, false), c = make_session(512, false);
  const auto r1 = generate(a, prompt_ids(), g);
  const auto r2 = generate(b, prompt_ids(), g);
  g.sampling.seed = 8;
  const auto r3 = generate(c, prompt_ids(), g);
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_NE(r1.tokens, r3.tokens);
}
