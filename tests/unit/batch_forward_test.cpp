// The forward pass over steps of several sequences sharing one KV pool, on
// the tiny synthetic decoder: a sequence's logits do not depend on what else
// is in the step (bit for bit), a fork's branches equal fresh runs of their
// whole token sequences while the source is untouched, and a prefix-cache hit
// gives the logits of a cold run.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "tiny_model.h"

namespace tally {
namespace {

using SeqId = KvCache::SeqId;

std::vector<int32_t> toks(int n, int mul, int add) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (mul * i * i + add * i + 1) % 50;
  return t;
}

struct Engine {
  ThreadPool pool;
  KvCache cache;
  Forward fwd;
  Engine(const Model& m, int threads, bool prefix = true)
      : pool(threads),
        cache({m.config().n_layer, m.config().n_kv_head, m.config().head_dim},
              KvCacheOptions{256, 8, DType::F16, 64u << 20, prefix}),
        fwd(m, pool, 64, 256, 64) {}
  // Evaluates tokens[from..] of seq alone, in chunks of `chunk`; returns the logits of the last token.
  std::vector<float> run(SeqId seq, const std::vector<int32_t>& tokens, int64_t from, int64_t chunk = 64) {
    const int64_t V = fwd.model().config().n_vocab;
    for (int64_t p = from; p < static_cast<int64_t>(tokens.size()); p += chunk) {
      const auto part = std::span<const int32_t>(tokens).subspan(
          static_cast<size_t>(p), static_cast<size_t>(std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - p)));
      fwd.eval(cache, seq, part, p, LogitsMode::Last);
    }
    return std::vector<float>(fwd.logits(), fwd.logits() + V);
  }
};

TEST(BatchForward, ASequencesLogitsDoNotDependOnTheRestOfTheStep) {
  const auto a = toks(11, 7, 3), b = toks(12, 5, 2), c = toks(4, 3, 1), d = toks(9, 2, 5);
  for (DType matrices : {DType::F32, DType::Q8_0})  // the scalar rows and the split-layout kernels
  for (int threads : {1, 2, 3}) {
    test::TinySpec spec;
    spec.matrix_type = matrices;
    const auto tm = test::make_tiny_model(spec);
    const int64_t V = tm->spec.n_vocab;
    // Alone: each history prefilled, then the step's tokens evaluated by themselves.
    Engine alone(*tm->model, threads);
    std::vector<std::vector<float>> want;
    for (const auto* t : {&a, &b, &c, &d}) want.push_back(alone.run(alone.cache.create_sequence(), *t, 0));

    // Together: a decodes its 11th token, b prefills its last 7, c all 4, d its last 9 in two runs of one step each.
    Engine e(*tm->model, threads);
    const SeqId sa = e.cache.create_sequence(), sb = e.cache.create_sequence(), sc = e.cache.create_sequence(),
                sd = e.cache.create_sequence();
    e.run(sa, std::vector<int32_t>(a.begin(), a.end() - 1), 0);
    e.run(sb, std::vector<int32_t>(b.begin(), b.begin() + 5), 0);
    const StepEntry step[] = {{sa, std::span<const int32_t>(a).last(1), 10, LogitsMode::Last},
                              {sb, std::span<const int32_t>(b).subspan(5), 5, LogitsMode::Last},
                              {sc, c, 0, LogitsMode::Last},
                              {sd, std::span<const int32_t>(d).first(5), 0, LogitsMode::None}};
    e.fwd.step(e.cache, step);
    for (int i = 0; i < 3; ++i) {
      const float* got = e.fwd.logits() + e.fwd.logits_row(static_cast<size_t>(i)) * V;
      EXPECT_EQ(std::vector<float>(got, got + V), want[static_cast<size_t>(i)]) << "entry " << i << ", " << threads << " threads";
    }
    EXPECT_EQ(e.fwd.logits_row(3), -1);
    const StepEntry rest[] = {{sd, std::span<const int32_t>(d).subspan(5), 5, LogitsMode::Last},
                              {sa, std::span<const int32_t>(&a[0], 1), 11, LogitsMode::Last}};
    e.fwd.step(e.cache, rest);
    EXPECT_EQ(std::vector<float>(e.fwd.logits(), e.fwd.logits() + V), want[3]) << threads << " threads";
  }
}

TEST(BatchForward, ARefusedStepWritesNothing) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, 2);
  const SeqId sa = e.cache.create_sequence(), sb = e.cache.create_sequence();
  const auto a = toks(6, 7, 3);
  e.run(sa, a, 0);
  const int32_t one[] = {4};
  // b's entry is fine, a's starts at a wrong position: neither is written.
  const StepEntry bad[] = {{sb, one, 0, LogitsMode::Last}, {sa, one, 3, LogitsMode::Last}};
  EXPECT_THROW(e.fwd.step(e.cache, bad), Error);
  EXPECT_EQ(e.cache.length(sa), 6);
  EXPECT_EQ(e.cache.length(sb), 0);
  const StepEntry twice[] = {{sa, one, 6, LogitsMode::Last}, {sa, one, 6, LogitsMode::Last}};
  EXPECT_THROW(e.fwd.step(e.cache, twice), Error);
  EXPECT_EQ(e.cache.length(sa), 6);
}

TEST(BatchForward, ForkedBranchesEqualFreshRunsAndLeaveTheSourceAlone) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, 2);
  const auto prompt = toks(13, 7, 3);  // the last block partly filled: the branches' first writes copy it
  const SeqId src = e.cache.create_sequence();
  const auto src_logits = e.run(src, prompt, 0);
  const SeqId x = e.cache.fork(src), y = e.cache.fork(src);
  auto bx = prompt, by = prompt;
  for (int32_t t : {5, 6, 7}) bx.push_back(t);
  for (int32_t t : {9, 1}) by.push_back(t);
  const auto lx = e.run(x, bx, 13, 1), ly = e.run(y, by, 13, 1);
  EXPECT_GE(e.cache.stats().copied_blocks, 2u);

  Engine fresh(*tm->model, 2);
  EXPECT_EQ(lx, fresh.run(fresh.cache.create_sequence(), bx, 0));
  EXPECT_EQ(ly, fresh.run(fresh.cache.create_sequence(), by, 0));
  // The source still continues as if no branch had written.
  auto bs = prompt;
  bs.push_back(2);
  EXPECT_EQ(e.run(src, bs, 13), fresh.run(fresh.cache.create_sequence(), bs, 0));
}

TEST(BatchForward, PrefixCacheHitGivesTheLogitsOfAColdRun) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, 2);
  const auto first = toks(30, 7, 3);
  const SeqId s = e.cache.create_sequence();
  e.run(s, first, 0);
  e.cache.free_sequence(s);
  auto second = first;
  second.resize(27);
  for (int32_t t : {3, 3, 8}) second.push_back(t);
  const SeqId h = e.cache.create_sequence_from_prefix(second, static_cast<int64_t>(second.size()) - 1);
  EXPECT_EQ(e.cache.length(h), 24);  // 3 full blocks of 8 shared, the rest computed
  const auto warm = e.run(h, second, 24);
  Engine cold(*tm->model, 2, false);
  EXPECT_EQ(warm, cold.run(cold.cache.create_sequence(), second, 0));
}


// A draft model's logits over part of the vocabulary (Forward::limit_logits):
// the rows of the first ids and of the groups holding the given tokens are
// exactly the full logits, whatever the layout of the output matrix (native
// rows, 16-row groups) and the number of rows in the step; every other row is
// -infinity; no limit gives all rows again.
TEST(BatchForward, LimitedLogitsAreTheFullLogitsOfTheirRowsAndMinusInfinityElsewhere) {
  const auto a = toks(9, 7, 3), b = toks(5, 3, 1);
  for (DType matrices : {DType::F32, DType::Q8_0})
  for (int threads : {1, 2}) {
    test::TinySpec spec;
    spec.matrix_type = matrices;
    spec.n_vocab = 100;  // groups [0,16) ... [96,100): the last one partial
    const auto tm = test::make_tiny_model(spec);
    const int64_t V = spec.n_vocab;
    auto step = [&](Engine& e) {  // a and b in one step, every position's logits of a, b's last
      const SeqId sa = e.cache.create_sequence(), sb = e.cache.create_sequence();
      const StepEntry entries[] = {{sa, a, 0, LogitsMode::All}, {sb, b, 0, LogitsMode::Last}};
      e.fwd.step(e.cache, entries);
      return std::vector<float>(e.fwd.logits(), e.fwd.logits() + 10 * V);
    };
    Engine full(*tm->model, threads), part(*tm->model, threads);
    const std::vector<float> want = step(full);
    const std::vector<int32_t> also = {3, 40, 95, 98, 41};  // 3: inside the prefix; 40, 41: one group
    part.fwd.limit_logits(10, also);
    const std::vector<float> got = step(part);
    auto kept = [](int64_t id) { return id < 16 || (id >= 32 && id < 48) || id >= 80; };
    for (int64_t r = 0; r < 10; ++r)
      for (int64_t id = 0; id < V; ++id) {
        const size_t i = static_cast<size_t>(r * V + id);
        if (kept(id)) EXPECT_EQ(got[i], want[i]) << "row " << r << ", id " << id;
        else EXPECT_EQ(got[i], -INFINITY) << "row " << r << ", id " << id;
      }
    part.fwd.limit_logits(0, {});
    EXPECT_EQ(step(part), want) << "the limit lifted";
  }
}
}  // namespace
}  // namespace tally
