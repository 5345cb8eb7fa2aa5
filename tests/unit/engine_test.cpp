// The engine that steps many sequences together (runtime/engine.h) and what
// is built on it, on the tiny synthetic decoder: continuations sampled in
// parallel equal single runs with the same seeds; beam search with shared
// blocks equals beam search with copied caches bit for bit, and both equal a
// brute-force search that recomputes every candidate from scratch; admission
// refuses what the pool cannot hold and cancelling frees blocks at once; a
// long prompt is prefilled in chunks while the others keep decoding (and
// counts as the next step's prefill, they do not); a pool
// too small for everyone preempts and resumes without changing any output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/beam_search.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/parallel.h"
#include "runtime/session.h"
#include "sampler/sampler.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

std::vector<int32_t> toks(int n, int mul, int add) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (mul * i * i + add * i + 1) % 50;
  return t;
}

EngineOptions small(int64_t n_ctx = 256, int64_t step_tokens = 64, bool prefix = true) {
  EngineOptions o;
  o.n_ctx = n_ctx;
  o.block_size = 8;
  o.step_tokens = step_tokens;
  o.max_sequences = 16;
  o.n_threads = 2;
  o.cache_type = DType::F32;
  o.kv_budget = 64u << 20;
  o.prefix_cache = prefix;
  return o;
}

GenerateResult single(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& g) {
  SessionOptions so;
  so.n_ctx = 256;
  so.cache_type = DType::F32;
  so.n_threads = 1;
  Session s(m, so);
  return generate(s, prompt, g);
}

TEST(Engine, ParallelContinuationsEqualSingleRunsWithTheirSeeds) {
  const auto tm = test::make_tiny_model();
  const auto prompt = toks(13, 7, 3);
  GenerateOptions g;
  g.max_tokens = 12;
  g.sampling.temperature = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0;
  g.sampling.seed = 40;
  Engine e(*tm->model, small());
  const ParallelResult r = generate_parallel(e, prompt, 4, g);
  ASSERT_EQ(r.continuations.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    GenerateOptions gi = g;
    gi.sampling.seed += static_cast<uint64_t>(i);
    EXPECT_EQ(r.continuations[i].tokens, single(*tm->model, prompt, gi).tokens) << "continuation " << i;
  }
  EXPECT_NE(r.continuations[0].tokens, r.continuations[1].tokens) << "different seeds gave the same text";
  EXPECT_EQ(e.running(), 0);
  EXPECT_EQ(e.cache_stats().blocks_used, 0) << "a continuation kept its blocks";
  // The prompt's blocks were held once: far less than 4 copies.
  const uint64_t one = e.block_bytes() * ((13 + 12 + 7) / 8);
  EXPECT_LT(r.peak_held_bytes, 3 * one);
}

// Beam search written out again with no cache at all: every candidate's
// sequence is evaluated from scratch by a fresh session.
std::vector<BeamHypothesis> brute_force_beams(const Model& m, const std::vector<int32_t>& prompt, int W,
                                              int64_t max_tokens, double lp) {
  auto logits_of = [&](const std::vector<int32_t>& seq) {
    SessionOptions so;
    so.n_ctx = 256;
    so.cache_type = DType::F32;
    so.n_threads = 1;
    Session s(m, so);
    const auto l = s.append(seq);
    return std::vector<float>(l.begin(), l.end());
  };
  struct B {
    std::vector<int32_t> seq;
    double sum;
  };
  std::vector<B> beams{{prompt, 0}};
  std::vector<BeamHypothesis> done;
  std::vector<double> l;
  for (int64_t len = 0;; ++len) {
    struct C {
      double sum;
      int beam;
      int32_t tok;
    };
    std::vector<C> cand;
    for (size_t b = 0; b < beams.size(); ++b) {
      log_softmax(logits_of(beams[b].seq), l);
      for (size_t t = 0; t < l.size(); ++t) cand.push_back({beams[b].sum + l[t], static_cast<int>(b), static_cast<int32_t>(t)});
    }
    std::stable_sort(cand.begin(), cand.end(), [](const C& a, const C& b) { return a.sum > b.sum; });
    std::vector<B> next;
    for (size_t r = 0; r < cand.size() && next.size() < static_cast<size_t>(W); ++r) {
      B nb = beams[cand[r].beam];
      nb.seq.push_back(cand[r].tok);
      nb.sum = cand[r].sum;
      next.push_back(nb);
    }
    if (len + 1 >= max_tokens) {
      for (const B& b : next) {
        BeamHypothesis h;
        h.tokens.assign(b.seq.begin() + static_cast<std::ptrdiff_t>(prompt.size()), b.seq.end());
        h.sum_logprobs = b.sum;
        h.score = b.sum / std::pow(static_cast<double>(h.tokens.size()), lp);
        done.push_back(h);
      }
      break;
    }
    beams = next;
  }
  std::stable_sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  return done;
}

TEST(Engine, BeamSearchSharedEqualsCopiedEqualsBruteForce) {
  const auto tm = test::make_tiny_model();
  const auto prompt = toks(11, 5, 2);
  for (int W : {1, 2, 4}) {
    BeamOptions o;
    o.width = W;
    o.max_tokens = 6;
    Engine shared(*tm->model, small()), copied(*tm->model, small());
    const BeamResult a = beam_search(shared, prompt, o);
    o.copy_caches = true;
    const BeamResult b = beam_search(copied, prompt, o);
    ASSERT_EQ(a.hypotheses.size(), static_cast<size_t>(W));
    ASSERT_EQ(b.hypotheses.size(), a.hypotheses.size());
    for (size_t i = 0; i < a.hypotheses.size(); ++i) {
      EXPECT_EQ(a.hypotheses[i].tokens, b.hypotheses[i].tokens) << "W " << W << " beam " << i;
      EXPECT_EQ(a.hypotheses[i].sum_logprobs, b.hypotheses[i].sum_logprobs) << "W " << W << " beam " << i;
    }
    const auto brute = brute_force_beams(*tm->model, prompt, W, 6, 1.0);
    for (size_t i = 0; i < a.hypotheses.size(); ++i) {
      EXPECT_EQ(a.hypotheses[i].tokens, brute[i].tokens) << "W " << W << " beam " << i;
      EXPECT_EQ(a.hypotheses[i].sum_logprobs, brute[i].sum_logprobs) << "W " << W << " beam " << i;
    }
    if (W > 1) {
      EXPECT_GT(b.copied_bytes, a.copied_bytes) << "copying every beam's cache copied no more than sharing";
      EXPECT_GT(b.peak_held_bytes, a.peak_held_bytes);
    }
    EXPECT_EQ(shared.cache_stats().blocks_used, 0);
    EXPECT_EQ(copied.cache_stats().blocks_used, 0);
  }
}

TEST(Engine, AdmissionRefusesWhatThePoolCannotHoldAndCancelFreesAtOnce) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, small(64));  // 8 blocks of 8
  const auto a = e.admit(toks(40, 7, 3));  // 5 blocks
  ASSERT_TRUE(a.id.has_value());
  const auto b = e.admit(toks(30, 5, 2));  // 4 blocks: only 3 left
  EXPECT_FALSE(b.id.has_value());
  EXPECT_NE(b.refusal.find("cannot hold a prompt of 30 tokens"), std::string::npos) << b.refusal;
  EXPECT_FALSE(e.can_admit(30));
  EXPECT_THROW(e.admit(toks(65, 1, 1)), Error);  // longer than the pool: never admissible
  EXPECT_THROW(e.admit(std::vector<int32_t>{}), Error);
  e.release(*a.id);  // cancelled before its first step
  EXPECT_EQ(e.cache_stats().blocks_used, 0);
  EXPECT_TRUE(e.admit(toks(30, 5, 2)).id.has_value());
  EXPECT_THROW(e.push(*a.id, 1), Error);  // a released id stays refused
}

TEST(Engine, LongPromptIsPrefilledInChunksWhileOthersDecode) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, small(256, 16));  // 16 tokens per step
  std::vector<Engine::Id> decoding;
  for (int i = 0; i < 3; ++i) {
    decoding.push_back(*e.admit(toks(5, 3 + i, 1)).id);
    while (!e.ready(decoding.back())) e.step();
  }
  const Engine::Id big = *e.admit(toks(100, 7, 3)).id;
  EXPECT_EQ(e.prefill_tokens(), 16);  // what a step can take of the 100
  int steps = 0;
  while (!e.ready(big)) {
    for (const auto& id : decoding) e.push(id, argmax(e.logits(id)));
    // The prompt's tokens left count, the decodes do not.
    EXPECT_EQ(e.prefill_tokens(), std::min(16, 100 - 13 * steps)) << "step " << steps;
    const auto ready = e.step();
    ++steps;
    // Every decoding sequence got its token this step, whatever the long prompt needed.
    for (const auto& id : decoding) EXPECT_NE(std::find(ready.begin(), ready.end(), id), ready.end()) << "step " << steps;
  }
  EXPECT_GE(steps, 100 / 13);  // 13 prompt tokens per step beside the 3 decodes
  for (const auto& id : decoding) e.push(id, argmax(e.logits(id)));
  EXPECT_EQ(e.prefill_tokens(), 0);
  // The chunked prompt's logits equal those of a prompt evaluated in one go.
  Engine one(*tm->model, small(256, 128));
  const Engine::Id id = *one.admit(toks(100, 7, 3)).id;
  one.step();
  ASSERT_TRUE(one.ready(id));
  EXPECT_EQ(std::vector<float>(e.logits(big).begin(), e.logits(big).end()),
            std::vector<float>(one.logits(id).begin(), one.logits(id).end()));
}

TEST(Engine, APoolTooSmallForEveryonePreemptsAndResumesWithoutChangingOutputs) {
  const auto tm = test::make_tiny_model();
  GenerateOptions g;
  g.max_tokens = 40;
  g.sampling.temperature = 0;
  // Four sequences of up to 6 + 40 positions in a pool of 96: they cannot all grow at once.
  Engine e(*tm->model, small(96, 64));
  std::vector<Engine::Id> ids;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(toks(6, 3 + i, 2));
    ids.push_back(*e.admit(prompts.back()).id);
  }
  std::map<int, std::vector<int32_t>> out;
  int active = 4;
  std::vector<bool> done(4, false);
  while (active > 0) {
    e.step();
    for (int i = 0; i < 4; ++i) {
      if (done[i] || !e.ready(ids[i])) continue;
      const int32_t t = argmax(e.logits(ids[i]));
      out[i].push_back(t);
      if (static_cast<int64_t>(out[i].size()) == g.max_tokens) {
        e.release(ids[i]);
        done[i] = true;
        --active;
      } else {
        e.push(ids[i], t);
      }
    }
  }
  EXPECT_GT(e.counters().preemptions, 0u) << "the pool was large enough: nothing was tested";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], single(*tm->model, prompts[i], g).tokens) << "sequence " << i;
}

// A sequence evaluated alone (what a Session is): a resent prompt keeps its own
// common prefix to the token, or takes the prefix cache's blocks when those
// reach further; either way the next logits are those of a fresh run.
TEST(Engine, ReusePrefixKeepsItsOwnPrefixOrTakesTheCachesWhenLonger) {
  const auto tm = test::make_tiny_model();
  const auto t = toks(40, 5, 2);
  std::vector<int32_t> longer = t;
  for (int32_t x : toks(9, 3, 7)) longer.push_back(x);
  auto fresh_last = [&](const std::vector<int32_t>& all) {
    Engine e(*tm->model, small());
    const auto logits = e.eval(e.open(), all);
    return std::vector<float>(logits.begin(), logits.end());
  };
  Engine e(*tm->model, small());
  // Own prefix: 27 of t's tokens, then other ones; 27 is kept (not a block boundary).
  const Engine::Id a = e.open();
  e.eval(a, t);
  std::vector<int32_t> edited(t.begin(), t.begin() + 27);
  edited.push_back(49);
  edited.push_back(48);
  EXPECT_EQ(e.reuse_prefix(a, edited), 27);
  EXPECT_EQ(e.tokens(a), std::vector<int32_t>(t.begin(), t.begin() + 27));
  auto got = e.eval(a, std::span<const int32_t>(edited).subspan(27));
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), fresh_last(edited));
  // The prefix cache reaches further: b holds something else, then is resent t + more;
  // the cache's blocks are t's first three (a holds them; its edit unkeyed the fourth).
  const Engine::Id b = e.open();
  e.eval(b, toks(12, 11, 5));
  const int64_t kept = e.reuse_prefix(b, longer);
  EXPECT_EQ(kept, 24) << "t's full blocks of 8 that a still holds";
  EXPECT_EQ(e.tokens(b), std::vector<int32_t>(t.begin(), t.begin() + kept));
  got = e.eval(b, std::span<const int32_t>(longer).subspan(static_cast<size_t>(kept)));
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), fresh_last(longer));
  // Never all of it: the last token is evaluated again for fresh logits.
  EXPECT_EQ(e.reuse_prefix(b, longer), static_cast<int64_t>(longer.size()) - 1);
}

// A prompt of whole blocks seen before is taken up to its last token (the
// hit ends inside its last block, which the next write copies): one token is
// evaluated again, and its logits are a cold run's.
TEST(Engine, APromptSeenBeforeIsTakenUpToItsLastToken) {
  const auto tm = test::make_tiny_model();
  const auto t = toks(40, 7, 3);  // 5 blocks of 8
  Engine e(*tm->model, small());
  const Engine::Admission first = e.admit(t);
  ASSERT_TRUE(first.id);
  EXPECT_EQ(first.cached_tokens, 0);
  while (!e.ready(*first.id)) e.step();
  const std::vector<float> cold(e.logits(*first.id).begin(), e.logits(*first.id).end());
  e.release(*first.id);
  const Engine::Admission again = e.admit(t);
  ASSERT_TRUE(again.id);
  EXPECT_EQ(again.cached_tokens, 39);
  const uint64_t tokens_before = e.counters().tokens;
  while (!e.ready(*again.id)) e.step();
  EXPECT_EQ(e.counters().tokens - tokens_before, 1u);
  EXPECT_EQ(std::vector<float>(e.logits(*again.id).begin(), e.logits(*again.id).end()), cold);
}

TEST(Engine, ForksThePoolCouldNeverHoldAreRefusedBeforeTheyStart) {
  const auto tm = test::make_tiny_model();
  Engine e(*tm->model, small(64));  // 8 blocks of 8
  EXPECT_NO_THROW(e.check_fits(7, 10, 6, "beam search"));   // 1 shared + 7 x 1
  test::expect_error([&] { e.check_fits(8, 10, 6, "beam search"); },
                     {"beam search: 8 sequences", "need up to 9 KV blocks", "the pool holds 8"});
  BeamOptions b;
  b.width = 5;  // 10 sequences at once
  b.max_tokens = 4;
  test::expect_error([&] { beam_search(e, toks(10, 3, 1), b); }, {"beam search: 10 sequences"});
  GenerateOptions g;
  g.max_tokens = 30;
  test::expect_error([&] { generate_parallel(e, toks(10, 3, 1), 3, g); }, {"parallel sampling: 3 sequences"});
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// A token pushed with a draft's guesses is evaluated with them in one step,
// beside another sequence's plain decode: each row equals the logits a
// sequence evaluated alone has at that position. A rollback leaves no block
// of the prefix cache keyed on a rejected guess (the block of guesses past
// the kept ones would otherwise stay findable), and the block the kept
// tokens fill is keyed once a later write follows it.
TEST(Engine, GuessesAreVerifiedInOneStepAndKeyedOnlyOnceKept) {
  const auto tm = test::make_tiny_model();
  const int64_t V = tm->model->config().n_vocab;
  EngineOptions o = small();
  o.logit_rows = o.max_sequences + 10;
  Engine e(*tm->model, o);
  const std::vector<int32_t> prompt = toks(5, 3, 1), other = toks(9, 5, 2);
  const Engine::Id a = *e.admit(prompt).id, b = *e.admit(other).id;
  while (!e.ready(a) || !e.ready(b)) e.step();
  const std::vector<int32_t> guesses = {11, 12, 13, 14, 15, 16, 17, 18, 19, 21};
  e.push(a, 10, guesses);
  e.push(b, 20);
  e.step();
  ASSERT_TRUE(e.ready(a) && e.ready(b));
  const auto rows = e.guess_logits(a);
  ASSERT_EQ(rows.size(), static_cast<size_t>(11 * V));
  std::vector<int32_t> all = prompt;
  all.push_back(10);
  all.insert(all.end(), guesses.begin(), guesses.end());  // positions 0..15: blocks 0..7 and 8..15
  for (int64_t j = 0; j < 11; ++j) {
    Engine alone(*tm->model, small());
    const Engine::Id s = alone.open();
    const auto want = alone.eval(s, std::span<const int32_t>(all).first(static_cast<size_t>(6 + j)));
    EXPECT_EQ(std::vector<float>(rows.begin() + j * V, rows.begin() + (j + 1) * V),
              std::vector<float>(want.begin(), want.end()))
        << "row " << j;
  }
  EXPECT_EQ(std::vector<float>(e.logits(a).begin(), e.logits(a).end()),
            std::vector<float>(rows.end() - V, rows.end()));
  // Two guesses kept (positions 6, 7); block 1 (positions 8..15) held only rejected ones.
  e.truncate(a, 8);
  auto probe = [&](const std::vector<int32_t>& t) {
    return e.cache().probe_prefix(t, static_cast<int64_t>(t.size())).positions;
  };
  EXPECT_EQ(probe(all), 0) << "a block was keyed on rejected guesses";
  e.push(a, 30);  // the next write follows block 0, which the kept guesses filled
  e.step();
  std::vector<int32_t> kept(all.begin(), all.begin() + 8);
  kept.push_back(30);
  EXPECT_EQ(probe(kept), 8) << "the block of kept tokens was not keyed";
}

// A step short of rows gives guesses up from the end; the rows returned say how many were evaluated.
TEST(Engine, GuessesBeyondTheRowsOfAStepAreDropped) {
  const auto tm = test::make_tiny_model();
  EngineOptions o = small();
  o.logit_rows = o.max_sequences + 2;
  Engine e(*tm->model, o);
  const Engine::Id a = *e.admit(toks(6, 3, 1)).id;
  while (!e.ready(a)) e.step();
  const std::vector<int32_t> guesses = {1, 2, 3, 4, 5};
  e.push(a, 7, guesses);
  e.step();
  ASSERT_TRUE(e.ready(a));
  EXPECT_EQ(e.guess_logits(a).size(), static_cast<size_t>(3 * tm->model->config().n_vocab));
  EXPECT_EQ(e.tokens(a).size(), 6u + 3u);
}

}  // namespace
}  // namespace tally
