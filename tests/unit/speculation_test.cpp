// Speculative decoding (runtime/speculation.h, the draft loop of
// runtime/generator.cpp, Generation's guess rule) on the tiny synthetic
// decoder: greedy with prompt-lookup drafts of 1 to 8 tokens gives exactly the
// tokens of greedy without; after the rollbacks the cache holds nothing of a
// rejected guess (the next logits equal a fresh run's over the kept tokens);
// the accept rule leaves the sampled distribution the target's (a chi-square
// test that a rule ignoring q fails); prompt lookup finds the latest match of
// the longest tail; the draft length backs off when guesses are not kept. A
// draft model (the target less its last layer) gives greedy's tokens too,
// its cache rolled back over its rejected guesses, and keeps the target's
// distribution when sampling (chi-square over the first speculated token).
// A draft limited to part of the vocabulary guesses the argmax over it and
// keeps greedy's tokens. DraftBatch, many sequences' draft in one engine,
// guesses what a DraftModel guesses for each alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/generation.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "runtime/speculation.h"
#include "session_helpers.h"
#include "tiny_model.h"

namespace tally {
namespace {

// Prompts that repeat themselves in several ways, so that prompt lookup has
// matches to propose, some of which the model continues otherwise.
std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> p;
  for (int r = 0; r < 4; ++r)
    for (int32_t t : {5, 17, 23, 42, 8, 31, 11}) p.push_back(t);
  p.push_back(5);
  p.push_back(17);
  out.push_back(p);
  for (int n : {12, 20, 27}) {
    std::vector<int32_t> twice = test::token_pattern(n);
    const std::vector<int32_t> again = test::token_pattern(n / 2);
    twice.insert(twice.end(), again.begin(), again.end());
    out.push_back(twice);
  }
  std::vector<int32_t> mixed;
  for (int i = 0; i < 40; ++i) mixed.push_back((i * 13 + (i / 5) * 7) % 50);
  out.push_back(mixed);
  return out;
}

SessionOptions speculating_session(int64_t draft_max) {
  SessionOptions o = test::small_block_session(DType::F16, 128);
  o.logit_rows = draft_max + 1;
  return o;
}

TEST(Speculation, GreedyWithDraftsEqualsGreedyWithout) {
  const auto tm = test::make_tiny_model();
  int64_t drafted = 0, accepted = 0;
  for (const auto& prompt : prompts()) {
    Session plain(*tm->model, test::small_block_session(DType::F16, 128));
    const GenerateResult want = generate(plain, prompt, test::greedy_options(60));
    for (int64_t k = 1; k <= 8; ++k) {
      Session s(*tm->model, speculating_session(k));
      GenerateOptions g = test::greedy_options(60);
      g.draft_max = k;
      const GenerateResult got = generate(s, prompt, g);
      EXPECT_EQ(got.tokens, want.tokens) << "k = " << k;
      EXPECT_EQ(got.stop, want.stop) << "k = " << k;
      EXPECT_LE(got.decode_steps, want.decode_steps) << "k = " << k;
      drafted += got.drafted;
      accepted += got.accepted;
      // The cache holds the prompt and what was generated (the last token when it was a kept guess),
      // nothing of a rejected guess.
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), want.tokens.begin(), want.tokens.end());
      ASSERT_GE(s.length(), static_cast<int64_t>(all.size()) - 1) << "k = " << k;
      EXPECT_EQ(s.tokens(), std::vector<int32_t>(all.begin(), all.begin() + s.length())) << "k = " << k;
    }
  }
  EXPECT_GT(drafted, 0) << "prompt lookup never proposed: the test would not exercise rollbacks";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted) << "no guess was ever rejected: the rollback was not exercised";
}

// After rollbacks, the next step's logits equal those of a fresh session that
// evaluates the kept tokens: nothing of a rejected guess stays in the cache.
TEST(Speculation, AfterRollbacksTheCacheHoldsOnlyTheKeptTokens) {
  const auto tm = test::make_tiny_model();
  int rolled = 0;
  for (const auto& prompt : prompts()) {
    Session s(*tm->model, speculating_session(6));
    GenerateOptions g = test::greedy_options(40);
    g.draft_max = 6;
    const GenerateResult r = generate(s, prompt, g);
    if (r.rolled_back == 0) continue;
    ++rolled;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    all.push_back(3);  // one more token after the generated ones
    const auto got = s.append(std::span<const int32_t>(all).subspan(static_cast<size_t>(s.length())));
    const std::vector<float> after(got.begin(), got.end());
    Session fresh(*tm->model, test::small_block_session(DType::F16, 128));
    const auto want = fresh.append(all);
    EXPECT_EQ(after, std::vector<float>(want.begin(), want.end()));
  }
  EXPECT_GT(rolled, 0) << "no run rolled anything back";
}

// The accept rule: over many draws (fixed seeds), the token a guessed step
// chooses is distributed as the target's p, whatever the draft's q.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

TEST(Speculation, TheAcceptRuleKeepsTheTargetsDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f, 0.7f, 0.3f};
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp(logits[i]);
  for (double& v : p) v /= z;
  const std::vector<double> q = {0.05, 0.4, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1};  // a draft model unlike the target
  GenerationParams gp;
  gp.sampling.temperature = 1;
  gp.sampling.top_k = 0;
  gp.sampling.top_p = 1;
  gp.sampling.min_p = 0;
  gp.max_tokens = 4;
  const int n = 40000;
  // 7 degrees of freedom: chi-square above 24.3 has probability 0.001 under the right distribution.
  const double limit = 24.32;
  std::mt19937_64 draft_rng(7);
  std::discrete_distribution<int> from_q(q.begin(), q.end());
  std::vector<int> lookup(p.size(), 0), draft(p.size(), 0), wrong(p.size(), 0);
  std::mt19937_64 wrong_rng(11);
  std::uniform_real_distribution<double> u01(0, 1);
  std::discrete_distribution<int> from_p(p.begin(), p.end());
  for (int i = 0; i < n; ++i) {
    gp.sampling.seed = static_cast<uint64_t>(i);
    {  // prompt lookup: a point mass on token 1, which p gives 0.09
      Generation g(gp, nullptr);
      const auto e = g.step(logits, {}, 8, Guess{1, {}});
      ++lookup[static_cast<size_t>(e->token)];
    }
    {  // a draft model: the guess drawn from q, q passed along
      Guess guess{from_q(draft_rng), {}};
      for (size_t t = 0; t < q.size(); ++t) guess.q.emplace_back(static_cast<int32_t>(t), static_cast<float>(q[t]));
      Generation g(gp, nullptr);
      const auto e = g.step(logits, {}, 8, guess);
      ++draft[static_cast<size_t>(e->token)];
    }
    // A rule that ignores q: keep the guess with probability p, else draw from p itself.
    const int x = from_q(wrong_rng);
    ++wrong[static_cast<size_t>(u01(wrong_rng) < p[static_cast<size_t>(x)] ? x : from_p(wrong_rng))];
  }
  EXPECT_LT(chi_square(lookup, p, n), limit);
  EXPECT_LT(chi_square(draft, p, n), limit);
  EXPECT_GT(chi_square(wrong, p, n), 10 * limit) << "the test cannot tell a wrong rule from the right one";
}

TEST(Speculation, GreedyKeepsTheGuessExactlyWhenItIsTheArgmax) {
  const std::vector<float> logits = {0.1f, 3.0f, 0.2f};
  GenerationParams gp;
  gp.sampling.temperature = 0;
  Generation a(gp, nullptr);
  EXPECT_EQ(a.step(logits, {}, 8, Guess{1, {}})->token, 1);
  EXPECT_TRUE(a.took_guess());
  Generation b(gp, nullptr);
  EXPECT_EQ(b.step(logits, {}, 8, Guess{2, {}})->token, 1);
  EXPECT_FALSE(b.took_guess());
}

TEST(PromptLookup, TheLatestMatchOfTheLongestTail) {
  const PromptLookup lookup(2, 4);
  // "1 2 3 9 ... 1 2 3 4 ... 2 3": the tail "2 3" last occurred before "4 5".
  const std::vector<int32_t> h = {1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 7, 2, 3};
  EXPECT_EQ(lookup.propose(h, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(lookup.propose(h, 10), (std::vector<int32_t>{4, 5, 6, 7, 2, 3}));
  // A longer tail wins over a later shorter match: "9 1 2 3" vs "2 3".
  const std::vector<int32_t> h2 = {9, 1, 2, 3, 8, 2, 3, 7, 9, 1, 2, 3};
  EXPECT_EQ(lookup.propose(h2, 2), (std::vector<int32_t>{8, 2}));
  EXPECT_TRUE(lookup.propose(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(lookup.propose(h, 0).empty());
}

// The draft length maximizes expected tokens over cost: with guesses kept
// with probability r and each costing c one-token steps, k guesses give
// (1 + r + ... + r^k) / (1 + c k).
TEST(DraftLength, GainIsExpectedTokensOverCost) {
  DraftLength d(8);
  for (int i = 0; i < 200; ++i) d.record(0, 0, 0.010);      // one-token steps: 10 ms
  for (int i = 0; i < 200; ++i) d.record(3, 1, 0.010 + 3 * 0.002);  // each guess 2 ms more; 1 kept of 2 tried
  const double r = d.acceptance(), c = 0.2;
  EXPECT_NEAR(r, 0.5, 0.01);
  for (int64_t k = 1; k <= 8; ++k) {
    double tokens = 0;
    for (int64_t i = 0; i <= k; ++i) tokens += std::pow(r, static_cast<double>(i));
    EXPECT_NEAR(d.gain(k), tokens / (1 + c * static_cast<double>(k)), 1e-3) << k;
  }
  // The best k under that model: 1.5 / 1.2 = 1.25 at k = 1, 1.75 / 1.4 = 1.25 at k = 2, 1.875 / 1.6 at 3...
  int64_t best = 1;
  for (int64_t k = 2; k <= 8; ++k)
    if (d.gain(k) > d.gain(best)) best = k;
  EXPECT_EQ(d.next(), best);
}

// A draft model's steps cost something of their own (it catches up on the
// tokens kept) besides each guess: with steps of k = 1 and k = 3 timed, the
// cost is the line through them, not through the plain step.
TEST(DraftLength, FitsALineThroughTheStepsWithGuesses) {
  DraftLength d(8);
  for (int i = 0; i < 20; ++i) d.record(0, 0, 0.060);
  for (int i = 0; i < 40; ++i) {
    d.record(1, 1, 0.107);
    d.record(3, 3, 0.164);
  }
  const double r = d.acceptance();
  const double a = 0.0785 / 0.060, b = 0.0285 / 0.060;
  for (int64_t k = 1; k <= 8; ++k) {
    double tokens = 0;
    for (int64_t i = 0; i <= k; ++i) tokens += std::pow(r, static_cast<double>(i));
    EXPECT_NEAR(d.gain(k), tokens / (a + b * static_cast<double>(k)), 1e-3) << k;
  }
}

TEST(DraftLength, BacksOffWhenGuessesAreNotKeptAndComesBack) {
  DraftLength d(8);
  EXPECT_EQ(d.next(), 0) << "the first steps have no guesses: they time a one-token step";
  EXPECT_EQ(d.next(), 0);
  EXPECT_GE(d.next(), 1) << "the prior (one guess in two kept, a guess at a tenth of a step) speculates";
  for (int i = 0; i < 10; ++i) d.record(0, 0, 0.010);  // one-token steps: 10 ms; each guess 2 ms more
  for (int i = 0; i < 40; ++i) d.record(8, 8, 0.026);
  EXPECT_EQ(d.next(), 8) << "everything kept: the longest draft";
  for (int i = 0; i < 40; ++i) d.record(4, 0, 0.018);
  int zeros = 0;
  for (int i = 0; i < 32; ++i) zeros += d.next() == 0;
  EXPECT_GE(zeros, 30) << "nothing kept: only probes speculate";
  EXPECT_LT(zeros, 32) << "but it probes";
  for (int i = 0; i < 40; ++i) d.record(1, 1, 0.012);
  EXPECT_GE(d.next(), 6) << "probes kept again: long drafts again";
}

// Guesses that cost as much as a step each never pay unless almost all are kept.
TEST(DraftLength, CostlyGuessesAreNotAskedFor) {
  DraftLength d(8);
  for (int i = 0; i < 100; ++i) d.record(0, 0, 0.010);
  for (int i = 0; i < 100; ++i) d.record(2, 1, 0.030);  // a guess costs a whole step; half are kept
  // Every timed step had two guesses: one probe of another length (4) comes
  // first, to tell a step's own cost from its guesses'; then none.
  EXPECT_EQ(d.next(), 4);
  int zeros = 0;
  for (int i = 0; i < 15; ++i) zeros += d.next() == 0;
  EXPECT_EQ(zeros, 15);
}

// A draft model's step has a cost of its own (catching up, verifying two
// tokens at once): a step of one guess alone looks as if the guess cost it
// all. The next step tries half the longest draft, and the line through
// both shows what a guess costs; guessing resumes.
TEST(DraftLength, ALengthTimedAloneIsFollowedByAnother) {
  DraftLength d(8, 0.5, 0.75, 64);
  for (int i = 0; i < 3; ++i) d.record(0, 0, 0.033);  // plain steps: 33 ms
  d.record(1, 1, 0.070);  // one guess, kept: 37 ms more (mostly the step's own cost)
  EXPECT_EQ(d.next(), 4) << "another length, at once";
  d.record(4, 4, 0.110);  // four guesses: 13 ms each beyond that
  EXPECT_GE(d.next(), 4) << "guesses pay at that cost when all are kept";
}

// The draft model: the target's weights less its last layer (the same seed
// writes token_embd, the output and layer 0 alike), so it agrees with the
// target often but not always.
test::TinySpec target_spec() {
  test::TinySpec t;
  t.tied = true;
  t.n_layer = 3;
  return t;
}
test::TinySpec draft_spec() {
  test::TinySpec d = target_spec();
  d.n_layer = 2;
  return d;
}

// Greedy generation of n tokens from prompt on target, k guesses a step
// (always k) from the draft model's session d, guessed among its first
// `vocab` ids and the history's (0: all).
GenerateResult greedy_with_draft(const Model& target, Session& d, std::span<const int32_t> prompt, int64_t k,
                                 int64_t n, int64_t vocab = 0) {
  Session s(target, speculating_session(k));
  GenerateOptions g = test::greedy_options(n);
  g.draft_max = k;
  g.fixed_draft = true;
  g.draft = &d;
  g.draft_vocab = vocab;
  return generate(s, prompt, g);
}

TEST(DraftModel, GreedyWithADraftModelEqualsGreedyWithout) {
  const auto target = test::make_tiny_model(target_spec());
  const auto draft_model = test::make_tiny_model(draft_spec());
  int64_t drafted = 0, accepted = 0, draft_rolled = 0;
  for (const auto& prompt : prompts()) {
    Session plain(*target->model, test::small_block_session(DType::F16, 128));
    const GenerateResult want = generate(plain, prompt, test::greedy_options(60));
    for (int64_t k : {1, 2, 3, 5, 8}) {
      Session d(*draft_model->model, test::small_block_session(DType::F16, 128));
      const GenerateResult got = greedy_with_draft(*target->model, d, prompt, k, 60);
      EXPECT_EQ(got.tokens, want.tokens) << "k = " << k;
      EXPECT_EQ(got.stop, want.stop) << "k = " << k;
      drafted += got.drafted;
      accepted += got.accepted;
      draft_rolled += got.draft_rolled_back;
      // The draft's cache: what the target kept, then at most its own unverified guesses.
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), want.tokens.begin(), want.tokens.end());
      const std::vector<int32_t>& dt = d.tokens();
      const auto same = std::mismatch(dt.begin(), dt.end(), all.begin(), all.end()).first - dt.begin();
      EXPECT_GE(same, static_cast<ptrdiff_t>(prompt.size())) << "k = " << k;
      EXPECT_LE(static_cast<int64_t>(dt.size()) - same, k) << "k = " << k;
    }
  }
  EXPECT_GT(accepted, 0) << "the draft never agreed: the test would not exercise kept guesses";
  EXPECT_LT(accepted, drafted) << "the draft always agreed: the rollback was not exercised";
  EXPECT_GT(draft_rolled, 0) << "the draft's cache never rolled back";
}

// A draft limited to part of the vocabulary (its first ids and its history's,
// Forward::limit_logits) guesses the argmax of its logits over those ids;
// the target's greedy tokens stay the same. The prompts use ids 0..15 only,
// so before any reply the draft may guess from the first group alone (an
// output matrix of its own: a tied one favours the ids it has just seen).
TEST(DraftModel, ALimitedVocabularyGuessesTheArgmaxOfItsIdsAndKeepsGreedysTokens) {
  const auto target = test::make_tiny_model(target_spec());
  test::TinySpec untied = draft_spec();
  untied.tied = false;
  const auto draft_model = test::make_tiny_model(untied);
  SamplerParams greedy;
  greedy.temperature = 0;
  int outside = 0;  // prompts whose unlimited guess is not among the first 16 ids
  for (int32_t mul : {3, 5, 7, 11}) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 20; ++i) prompt.push_back((i * mul + i / 4) % 16);
    Session d(*draft_model->model, test::small_block_session(DType::F16, 128));
    DraftModel limited(d, greedy, 1);
    const std::vector<Guess> g = limited.propose(prompt, 1);
    ASSERT_EQ(g.size(), 1u);
    Session fresh(*draft_model->model, test::small_block_session(DType::F16, 128));
    const auto logits = fresh.append(prompt);
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(g[0].token, std::max_element(logits.begin(), logits.begin() + 16) - logits.begin()) << "mul " << mul;
    outside += best >= 16;

    Session plain(*target->model, test::small_block_session(DType::F16, 128));
    const GenerateResult want = generate(plain, prompt, test::greedy_options(40));
    for (int64_t k : {2, 5}) {
      Session dd(*draft_model->model, test::small_block_session(DType::F16, 128));
      const GenerateResult got = greedy_with_draft(*target->model, dd, prompt, k, 40, 1);
      EXPECT_EQ(got.tokens, want.tokens) << "mul " << mul << ", k " << k;
      EXPECT_GT(got.drafted, 0);
    }
  }
  EXPECT_GT(outside, 0) << "the limit never changed a guess: the test would not see it ignored";
}

// After the draft's rollbacks its next logits equal a fresh draft session's
// over the same tokens: nothing of a rejected guess stays in its cache.
TEST(DraftModel, ItsCacheHoldsNothingOfARejectedGuess) {
  const auto target = test::make_tiny_model(target_spec());
  const auto draft_model = test::make_tiny_model(draft_spec());
  int rolled = 0;
  for (const auto& prompt : prompts()) {
    Session d(*draft_model->model, test::small_block_session(DType::F16, 128));
    const GenerateResult r = greedy_with_draft(*target->model, d, prompt, 4, 30);
    if (r.draft_rolled_back == 0) continue;
    ++rolled;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    DraftModel follower(d, test::greedy_options(30).sampling);
    follower.follow(all);  // rolls back the unverified guesses, evaluates the rest
    ASSERT_EQ(d.tokens(), all);
    const std::vector<int32_t> one = {7};
    const auto got = d.append(one);
    const std::vector<float> after(got.begin(), got.end());
    Session fresh(*draft_model->model, test::small_block_session(DType::F16, 128));
    all.push_back(7);
    const auto want = fresh.append(all);
    EXPECT_EQ(after, std::vector<float>(want.begin(), want.end()));
  }
  EXPECT_GT(rolled, 0) << "no run rolled the draft back";
}

// DraftBatch guesses for several sequences at once what a DraftModel guesses
// for each alone (greedy), follows each history as it grows and diverges
// from the guesses (rolling its cache back), and prefills a new sequence in
// the engine's chunks over several calls, with no guesses meanwhile.
TEST(DraftBatch, GuessesForManySequencesWhatADraftModelGuessesForEachAlone) {
  const auto draft_model = test::make_tiny_model(draft_spec());
  EngineOptions eo;
  eo.n_ctx = 512;
  eo.block_size = 8;
  eo.n_threads = 2;
  eo.step_tokens = 16;  // the prompts take two or three calls to prefill
  eo.max_sequences = 8;
  eo.logit_rows = 16;
  DraftBatch batch(*draft_model->model, eo);
  const std::vector<std::vector<int32_t>> ps = prompts();
  std::vector<std::vector<int32_t>> histories = ps;
  std::vector<std::optional<Engine::Id>> seqs(ps.size());
  SamplerParams greedy;
  greedy.temperature = 0;
  std::vector<Sampler> samplers(ps.size(), Sampler(greedy));
  std::vector<int> calls_without(ps.size(), 0), calls_with(ps.size(), 0);
  const int32_t V = static_cast<int32_t>(draft_model->model->config().n_vocab);
  for (int turn = 0; turn < 10; ++turn) {
    std::vector<DraftBatch::Want> wants;
    for (size_t i = 0; i < ps.size(); ++i)
      wants.push_back({&seqs[i], histories[i], 1 + static_cast<int64_t>((turn + i) % 5), &samplers[i]});
    const std::vector<std::vector<Guess>> got = batch.propose(wants);
    ASSERT_EQ(got.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const int64_t k = wants[i].k;
      if (got[i].empty()) {
        ++calls_without[i];
        histories[i].push_back((histories[i].back() + 1) % V);
        continue;
      }
      ++calls_with[i];
      ASSERT_EQ(static_cast<int64_t>(got[i].size()), k) << "sequence " << i << ", turn " << turn;
      Session alone(*draft_model->model, test::small_block_session(DType::F16, 512));
      DraftModel one(alone, greedy);
      const std::vector<Guess> want = one.propose(histories[i], k);
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(got[i][static_cast<size_t>(j)].token, want[static_cast<size_t>(j)].token)
            << "sequence " << i << ", turn " << turn << ", guess " << j;
        EXPECT_TRUE(got[i][static_cast<size_t>(j)].q.empty()) << "a greedy draft's q is a point mass";
      }
      // The target keeps the first half of the guesses, then writes a token of its own.
      for (int64_t j = 0; j < k / 2; ++j) histories[i].push_back(got[i][static_cast<size_t>(j)].token);
      histories[i].push_back((got[i][static_cast<size_t>(k / 2)].token + 1) % V);
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_GE(calls_without[i], 1) << "sequence " << i << " was never prefilling: the prompts are too short to test it";
    EXPECT_GE(calls_with[i], 5) << "sequence " << i;
  }
  EXPECT_GT(batch.rolled_back(), 0) << "no sequence rolled back over a rejected guess";
  for (const auto& id : seqs) batch.release(*id);
  EXPECT_EQ(batch.engine().running(), 0);
}

// Sampling with a draft model: the second speculated token (the third
// generated: the first comes from the prefill) is distributed as the
// target's, given the two before it. A q that is not the distribution the
// guess was drawn from (halved, say) fails it: chi-square 258 against 42.
// top-k 3 keeps the cells few enough for a chi-square test.
TEST(DraftModel, SamplingKeepsTheTargetsDistribution) {
  const auto target = test::make_tiny_model(target_spec());
  const auto draft_model = test::make_tiny_model(draft_spec());
  const std::vector<int32_t> prompt = {5, 17, 23, 42, 8};
  GenerateOptions g;
  g.max_tokens = 3;
  g.sampling.temperature = 1.5f;  // flatter: the draft's q and the target's p differ more
  g.sampling.top_k = 3;
  g.sampling.top_p = 1;
  g.sampling.min_p = 0;
  g.draft_max = 2;
  g.fixed_draft = true;
  Session s(*target->model, speculating_session(2));
  Session d(*draft_model->model, test::small_block_session(DType::F16, 128));
  g.draft = &d;
  // The target's distribution of the third token given the first two: top-3 of softmax(logits / T).
  Session ref(*target->model, test::small_block_session(DType::F16, 128));
  std::map<std::pair<int32_t, int32_t>, std::map<int32_t, double>> p_of;
  auto target_p = [&](int32_t a, int32_t b) -> const std::map<int32_t, double>& {
    auto [it, fresh] = p_of.try_emplace({a, b});
    if (!fresh) return it->second;
    std::vector<int32_t> all = prompt;
    all.push_back(a);
    all.push_back(b);
    ref.truncate(0);
    const auto l = ref.append(all);
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + 3, ids.end(), [&](int32_t x, int32_t y) { return l[x] > l[y]; });
    double z = 0;
    for (int i = 0; i < 3; ++i) z += std::exp((l[ids[i]] - l[ids[0]]) / 1.5);
    for (int i = 0; i < 3; ++i) it->second[ids[i]] = std::exp((l[ids[i]] - l[ids[0]]) / 1.5) / z;
    return it->second;
  };
  std::map<std::pair<int32_t, int32_t>, std::map<int32_t, int>> counts;
  int64_t drafted = 0, accepted = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    s.truncate(0);
    g.sampling.seed = static_cast<uint64_t>(i) + 1;
    const GenerateResult r = generate(s, prompt, g);
    ASSERT_EQ(r.tokens.size(), 3u);
    drafted += r.drafted;
    accepted += r.accepted;
    ++counts[{r.tokens[0], r.tokens[1]}][r.tokens[2]];
  }
  ASSERT_GT(drafted, n / 2) << "the third token was rarely speculated";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  double x = 0;
  int df = 0;
  for (const auto& [prefix, c] : counts) {
    int total = 0;
    for (const auto& [t, k] : c) total += k;
    if (total < 50) continue;  // too few for expected counts the test can trust
    const auto& p = target_p(prefix.first, prefix.second);
    for (const auto& [t, k] : c) ASSERT_TRUE(p.count(t)) << "token " << t << " is outside the target's top 3";
    for (const auto& [t, pt] : p) {
      const double e = pt * total;
      const double o = c.count(t) ? c.at(t) : 0;
      x += (o - e) * (o - e) / e;
    }
    df += 2;
  }
  ASSERT_GE(df, 4);
  // The 0.999 quantile of chi-square with df degrees of freedom, by Wilson-Hilferty.
  const double z = 3.09, h = 2.0 / (9.0 * df);
  const double limit = df * std::pow(1 - h + z * std::sqrt(h), 3);
  EXPECT_LT(x, limit) << "df " << df;
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// Steps of 1, 2, 4 and 8 tokens timed 50 times each: the target's at 45 ms +
// 13 ms a token, the draft's at 15 ms + 4 ms a token.
void time_target(StepGuesses& g) {
  for (int i = 0; i < 50; ++i)
    for (int64_t n : {1, 2, 4, 8}) g.record(n, 0.045 + 0.013 * static_cast<double>(n));
}
void time_draft(StepGuesses& g) {
  for (int i = 0; i < 50; ++i)
    for (int64_t n : {1, 2, 4, 8}) g.record_draft(n, 0.015 + 0.004 * static_cast<double>(n));
}

// A batched step of n tokens costing 45 ms + 13 ms n (weights read once,
// compute per token): one sequence alone takes guesses while their chance to
// be kept beats the step's rising cost; a step of eight sequences takes only
// guesses almost sure to be kept; before steps of several sizes were timed, none.
TEST(StepGuesses, GuessesGoInWhileTheyRaiseTokensPerSecond) {
  StepGuesses g;
  const std::vector<StepGuesses::Proposal> one = {{8, 0.9}};
  EXPECT_EQ(g.take(one, 0), std::vector<int64_t>{0}) << "untimed";
  time_target(g);
  ASSERT_TRUE(g.timed());
  // Alone: guess i is kept with 0.9^i; it goes in while 0.9^i (a + b T') > b T, T the expected tokens so far.
  std::vector<int64_t> want = {0};
  double tokens = 1, seconds = 0.045 + 0.013, q = 0.9;
  while (want[0] < 8 && q * seconds > 0.013 * tokens) ++want[0], tokens += q, seconds += 0.013, q *= 0.9;
  const std::vector<int64_t> alone = g.take(one, 0);
  EXPECT_EQ(alone, want);
  EXPECT_GE(alone[0], 3);
  // Eight sequences decoding: a guess kept with 0.6 costs more than it brings.
  const std::vector<StepGuesses::Proposal> eight(8, {8, 0.6});
  EXPECT_EQ(g.take(eight, 0), std::vector<int64_t>(8, 0));
  // The likeliest guesses first: of two sequences, the one whose guesses are kept more often gets more.
  const std::vector<StepGuesses::Proposal> two = {{8, 0.5}, {8, 0.95}};
  const std::vector<int64_t> t = g.take(two, 0);
  EXPECT_GT(t[1], t[0]);
}

// Steps priced as timed where their size was: a step of 1-16 tokens costing
// 60 ms + 1.5 ms a token, and a tile pass of 13 ms more past 8 tokens (the
// 8-token tiles of the AVX-512 kernels). One sequence alone stops its guesses
// at the tile's edge; eight decoding take none (a 9th token costs 14.5 ms,
// which a line through these steps, 2.7 ms a token, does not see);
// seven take one, which fills the tile for 1.5 ms.
TEST(StepGuesses, GuessesStopAtTheTilesEdgeWhereTheStepsWereTimed) {
  auto cost = [](int64_t n) { return 0.060 + 0.0015 * static_cast<double>(n) + (n > 8 ? 0.013 : 0.0); };
  StepGuesses g;
  for (int i = 0; i < 20; ++i)
    for (int64_t n = 1; n <= 16; ++n) g.record(n, cost(n));
  ASSERT_TRUE(g.timed());
  const std::vector<StepGuesses::Proposal> one = {{8, 0.9}};
  EXPECT_EQ(g.take(one, 0), std::vector<int64_t>{7}) << "1 + 7 tokens fill the tile; an 8th guess would open another";
  const std::vector<StepGuesses::Proposal> eight(8, {8, 0.6});
  EXPECT_EQ(g.take(eight, 0), std::vector<int64_t>(8, 0));
  const std::vector<StepGuesses::Proposal> seven(7, {8, 0.6});
  const std::vector<int64_t> t = g.take(seven, 0);
  EXPECT_EQ(std::accumulate(t.begin(), t.end(), int64_t{0}), 1);
  // Past the sizes timed, the line: a prefill chunk of 100 tokens beside one
  // sequence prices a guess at the line's slope, and one kept with 0.9 pays.
  EXPECT_GE(g.take(one, 100)[0], 1);
  // One slow step of 2 tokens (the machine busy elsewhere) prices a lone
  // sequence's guess out, until that size's time ages out and the line prices
  // it again (no such step would be taken to correct it).
  g.record(2, 1.0);
  EXPECT_EQ(g.take(one, 0), std::vector<int64_t>{0});
  for (int i = 0; i < 150; ++i) g.record(1, cost(1)), g.record(16, cost(16));
  EXPECT_GE(g.take(one, 0)[0], 1);
}

// A draft model's guess costs the target's compute and the draft's step too:
// alone, each drafted guess needs a draft step of its own (15 ms + 4 ms n), so
// fewer go in than for free guesses kept as often; a step of several
// sequences takes none. Until the draft was timed, its guesses are weighed
// as free ones (the first ones time it).
TEST(StepGuesses, ADraftedGuessPaysForTheDraftsStepToo) {
  StepGuesses g;
  time_target(g);
  const std::vector<StepGuesses::Proposal> free_one = {{8, 0.9, false}}, drafted_one = {{8, 0.9, true}};
  EXPECT_EQ(g.take(drafted_one, 0), g.take(free_one, 0)) << "the draft untimed";
  time_draft(g);
  // Alone: guess i goes in while 0.9^i S > (13 + 4 + 15 ms) T.
  std::vector<int64_t> want = {0};
  double tokens = 1, seconds = 0.045 + 0.013, q = 0.9;
  const double c = 0.013 + 0.004 + 0.015;
  while (want[0] < 8 && q * seconds > c * tokens) ++want[0], tokens += q, seconds += c, q *= 0.9;
  const std::vector<int64_t> alone = g.take(drafted_one, 0);
  EXPECT_EQ(alone, want);
  EXPECT_LT(alone[0], g.take(free_one, 0)[0]);
  EXPECT_GE(alone[0], 1);
  // Several sequences in the step: no drafted guesses, though four sharing
  // the depth's draft step (3.6 tokens for 15 + 4 x 17 ms against 41 tokens/s)
  // would price above none: such rounds measured below no draft.
  const std::vector<StepGuesses::Proposal> four(4, {8, 0.9, true});
  EXPECT_EQ(g.take(four, 0), std::vector<int64_t>(4, 0));
  EXPECT_EQ(g.take(drafted_one, 1), std::vector<int64_t>{0}) << "one drafting, one decoding";
  EXPECT_EQ(g.take(drafted_one, 64), std::vector<int64_t>{0}) << "one drafting beside another's prompt chunk";
  EXPECT_TRUE(StepGuesses::drafts(1, 0));
  EXPECT_FALSE(StepGuesses::drafts(1, 64));
  EXPECT_FALSE(StepGuesses::drafts(4, 0));
  const std::vector<StepGuesses::Proposal> four_and_one_drafting = {
      {8, 0.9, true}, {8, 0.9, false}, {8, 0.9, false}, {8, 0.9, false}};
  const std::vector<int64_t> m = g.take(four_and_one_drafting, 0);
  EXPECT_EQ(m[0], 0) << "one drafting sequence among four";
  EXPECT_GT(m[1], 0) << "free guesses kept as often go in";
}

// The draft engine's first step is often a prompt's prefill: a round of
// guesses is not priced at that step's whole time (no guess would be drafted
// again, so no round would be timed), but at its time per token until steps
// of other sizes give a line; a one-token step timed alone is its own price.
TEST(StepGuesses, ADraftTimedOnlyOnAPrefillStillGuesses) {
  StepGuesses g;
  time_target(g);
  const std::vector<StepGuesses::Proposal> drafted_one = {{8, 0.9, true}};
  g.record_draft(300, 0.45);
  EXPECT_GE(g.take(drafted_one, 0)[0], 1) << "priced at a whole prefill";
  StepGuesses slow;
  time_target(slow);
  slow.record_draft(1, 0.45);  // a round of guesses as dear as 8 target steps
  EXPECT_EQ(slow.take(drafted_one, 0)[0], 0);
}

// A draft that has not seen a sequence's history prefills it before its
// first guess: that cost, spread over the steps the reply has left, goes in
// the first guess's price, so a short reply after a long prompt does not
// start drafting and a long one does.
TEST(StepGuesses, ADraftStartsOnlyWhereTheReplyCanRepayItsPrefill) {
  StepGuesses g;
  time_target(g);
  time_draft(g);
  const StepGuesses::Proposal seen{8, 0.9, true, 0, 64};
  ASSERT_GE(g.take({&seen, 1}, 0)[0], 1);
  // 2,000 unseen tokens at 4 ms, with 16 tokens left (2.8 steps of 5.7 expected tokens): 2.8 s a step.
  const StepGuesses::Proposal short_reply{8, 0.9, true, 2000, 16};
  EXPECT_EQ(g.take({&short_reply, 1}, 0)[0], 0);
  // The first guess's price, as the rule computes it: alone, guess i goes in
  // while 0.9^i S > c T, c = 13 + 4 + 15 ms and at the first the opening too.
  const StepGuesses::Proposal long_reply{8, 0.9, true, 200, 2000};
  double per_step = 1, kept = 1;
  for (int i = 0; i < 8; ++i) per_step += (kept *= 0.9);
  const double opening = 200 * 0.004 / (2000 / per_step);
  int64_t want = 0;
  double tokens = 1, seconds = 0.045 + 0.013, q = 0.9;
  const double c = 0.013 + 0.004 + 0.015;
  while (want < 8 && q * seconds > (c + (want == 0 ? opening : 0)) * tokens)
    tokens += q, seconds += c + (want == 0 ? opening : 0), q *= 0.9, ++want;
  EXPECT_EQ(g.take({&long_reply, 1}, 0)[0], want);
  EXPECT_GE(want, 1);
}

}  // namespace
}  // namespace tally
