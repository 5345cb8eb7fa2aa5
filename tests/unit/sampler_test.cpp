// The sampler: greedy limits, determinism by seed, the drawn distribution
// against softmax, each truncation rule on logits whose answer is known, the
// repetition penalty, and parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampler/rng.h"
#include "sampler/sampler.h"

namespace tally {
namespace {

// Plain sampling: no truncation, no penalty.
SamplerParams plain(float temperature, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.repeat_penalty = 1;
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0, 3);
  std::vector<float> l(n);
  for (auto& v : l) v = g(rng);
  return l;
}

// Token counts over `draws` samples.
std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.sample(logits, {});
    EXPECT_GE(t, 0);
    EXPECT_LT(t, static_cast<int32_t>(logits.size()));
    ++count[t];
  }
  return count;
}

// log-probabilities, so that a test states the distribution it wants directly.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, TemperatureZeroIsArgmax) {
  std::mt19937 rng(1);
  Sampler s(plain(0));
  for (int trial = 0; trial < 200; ++trial) {
    const auto l = random_logits(1 + trial % 50, rng);
    EXPECT_EQ(s.sample(l, {}), argmax(l));
  }
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);  // ties: the first
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, {}), 1);
}

TEST(Sampler, TopKOneIsArgmaxAtAnyTemperature) {
  std::mt19937 rng(2);
  for (float temp : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SamplerParams p = plain(temp, 7);
    p.top_k = 1;
    Sampler s(p);
    for (int trial = 0; trial < 100; ++trial) {
      const auto l = random_logits(64, rng);
      ASSERT_EQ(s.sample(l, {}), argmax(l)) << "temp " << temp;
    }
  }
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  const std::vector<float> l(50, 0.0f);  // uniform over 50 tokens
  auto draws = [&](uint64_t seed) {
    Sampler s(plain(1, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(l, {}));
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  const auto a = draws(1), b = draws(2);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 30) << "seeds 1 and 2 agree on " << same << " of 200 draws (expected about 4)";
}

// Pearson's chi-square over k categories with k - 1 degrees of freedom. For
// 7 degrees of freedom, P(chi2 > 35) < 1e-5, so a correct sampler passes with
// the fixed seeds and a wrong temperature or an off-by-one in the cumulative
// walk (both shift whole percents of mass) fails by far.
double chi_square(const std::vector<int>& count, const std::vector<double>& p, int draws) {
  double chi = 0;
  for (size_t i = 0; i < count.size(); ++i) {
    const double e = p[i] * draws;
    chi += (count[i] - e) * (count[i] - e) / e;
  }
  return chi;
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  const std::vector<float> l = {0.0f, 0.5f, 1.0f, -1.0f, 2.0f, 0.1f, -0.5f, 1.5f};
  const int draws = 20000;
  for (float temp : {1.0f, 2.0f, 0.7f}) {
    std::vector<double> p(l.size());
    double sum = 0;
    for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(l[i] / temp);
    for (double& v : p) v /= sum;
    Sampler s(plain(temp, 1234));
    const auto count = histogram(s, l, draws);
    EXPECT_LT(chi_square(count, p, draws), 35.0) << "temp " << temp;
  }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  // Sorted by probability the tokens are 3 (0.5), 0 (0.3), 2 (0.15), 1 (0.05).
  const auto l = logits_of({0.3, 0.05, 0.15, 0.5});
  struct Case {
    float top_p;
    std::set<int32_t> keep;
  };
  for (const Case& c : {Case{0.45f, {3}}, Case{0.75f, {3, 0}}, Case{0.85f, {3, 0, 2}}, Case{0.99f, {3, 0, 2, 1}}}) {
    SamplerParams p = plain(1, 5);
    p.top_p = c.top_p;
    Sampler s(p);
    const auto count = histogram(s, l, 4000);
    for (int32_t t = 0; t < 4; ++t) {
      if (c.keep.count(t)) {
        EXPECT_GT(count[t], 0) << "top_p " << c.top_p << " never drew kept token " << t;
      } else {
        EXPECT_EQ(count[t], 0) << "top_p " << c.top_p << " drew token " << t;
      }
    }
  }
  // The kept tokens are renormalized: with {3, 0}, P(3) = 0.5 / 0.8.
  SamplerParams p = plain(1, 6);
  p.top_p = 0.75f;
  Sampler s(p);
  const auto count = histogram(s, l, 20000);
  EXPECT_LT(chi_square({count[3], count[0]}, {0.625, 0.375}, 20000), 20.0);
}

TEST(Sampler, MinPDropsTokensBelowTheFraction) {
  const auto l = logits_of({0.06, 0.4, 0.04, 0.3, 0.2});  // p_max = 0.4
  struct Case {
    float min_p;
    std::set<int32_t> keep;
  };
  // Floors: 0.2 * 0.4 = 0.08 keeps {0.4, 0.3, 0.2}; 0.6 * 0.4 = 0.24 keeps
  // {0.4, 0.3}; 0.9 keeps p_max only; 0.05 (floor 0.02) keeps all five.
  for (const Case& c : {Case{0.2f, {1, 3, 4}}, Case{0.6f, {1, 3}}, Case{0.9f, {1}}, Case{0.05f, {0, 1, 2, 3, 4}}}) {
    SamplerParams p = plain(1, 8);
    p.min_p = c.min_p;
    Sampler s(p);
    const auto count = histogram(s, l, 4000);
    for (int32_t t = 0; t < 5; ++t) {
      if (c.keep.count(t)) {
        EXPECT_GT(count[t], 0) << "min_p " << c.min_p << " never drew kept token " << t;
      } else {
        EXPECT_EQ(count[t], 0) << "min_p " << c.min_p << " drew token " << t;
      }
    }
  }
}

TEST(Sampler, TopKKeepsTheKLargest) {
  const std::vector<float> l = {0.0f, 3.0f, 1.0f, 2.9f, -1.0f, 2.8f};
  SamplerParams p = plain(5, 9);  // a high temperature: without top-k all six are likely
  p.top_k = 3;
  Sampler s(p);
  const auto count = histogram(s, l, 3000);
  EXPECT_EQ(count[0] + count[2] + count[4], 0);
  EXPECT_GT(count[1], 0);
  EXPECT_GT(count[3], 0);
  EXPECT_GT(count[5], 0);
}

TEST(Sampler, RepetitionPenaltyPushesRepeatedTokensDown) {
  SamplerParams p = plain(0);
  p.repeat_penalty = 1.1f;
  p.repeat_last_n = 3;
  Sampler s(p);
  // A positive logit is divided: 2.0 / 1.1 = 1.82 < 1.9.
  const std::vector<float> pos = {2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.sample(pos, {}), 0);
  EXPECT_EQ(s.sample(pos, std::vector<int32_t>{0}), 2);
  // A negative logit is multiplied: -1.0 * 1.1 = -1.1 < -1.05.
  const std::vector<float> neg = {-1.0f, -1.05f, -3.0f};
  EXPECT_EQ(s.sample(neg, {}), 0);
  EXPECT_EQ(s.sample(neg, std::vector<int32_t>{0}), 1);
  // Once per token however often it occurs: 2.0 / 1.1 = 1.82 > 1.7 (twice would be 1.65).
  const std::vector<float> once = {2.0f, 1.7f};
  EXPECT_EQ(s.sample(once, std::vector<int32_t>{0, 0, 0}), 0);
  // Only the last repeat_last_n tokens count; ids outside the vocabulary are ignored.
  EXPECT_EQ(s.sample(pos, std::vector<int32_t>{0, 1, 1, 1}), 0);
  EXPECT_EQ(s.sample(pos, std::vector<int32_t>{1, 0, -5, 99}), 2);
}

TEST(Sampler, RepetitionPenaltyOffChangesNothing) {
  SamplerParams p = plain(0);
  p.repeat_penalty = 1.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.99f}, std::vector<int32_t>{0, 0}), 0);
}

void expect_invalid(const std::function<void(SamplerParams&)>& set, const std::string& flag) {
  SamplerParams p;
  set(p);
  try {
    p.validate();
    ADD_FAILURE() << "accepted; expected an error naming " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(SamplerParams, ValidateNamesTheBadParameter) {
  EXPECT_NO_THROW(SamplerParams{}.validate());
  EXPECT_NO_THROW(plain(0).validate());
  expect_invalid([](SamplerParams& p) { p.temperature = -0.1f; }, "the temperature");
  expect_invalid([](SamplerParams& p) { p.temperature = NAN; }, "the temperature");
  expect_invalid([](SamplerParams& p) { p.temperature = INFINITY; }, "the temperature");
  expect_invalid([](SamplerParams& p) { p.top_k = -1; }, "top-k");
  expect_invalid([](SamplerParams& p) { p.top_p = 0; }, "top-p");
  expect_invalid([](SamplerParams& p) { p.top_p = 1.01f; }, "top-p");
  expect_invalid([](SamplerParams& p) { p.min_p = 1; }, "min-p");
  expect_invalid([](SamplerParams& p) { p.min_p = -0.1f; }, "min-p");
  expect_invalid([](SamplerParams& p) { p.repeat_penalty = 0; }, "the repeat penalty");
  expect_invalid([](SamplerParams& p) { p.repeat_penalty = -1; }, "the repeat penalty");
}

TEST(Sampler, EmptyLogitsAreAnError) {
  Sampler s(plain(1));
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
}

TEST(Rng, SameSeedSameNumbersAndUniformInUnitInterval) {
  Rng a(99), b(99), c(100);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differ += x != c.next_u64();
  }
  EXPECT_GT(differ, 990);
  Rng r(5);
  double sum = 0;
  int low = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    low += u < 0.1;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // 5 standard deviations of the mean
  EXPECT_NEAR(low, n / 10, 500);     // about 5 standard deviations
  Rng z(0);  // seed 0 is a valid seed (splitmix64 spreads it)
  EXPECT_NE(z.next_u64(), z.next_u64());
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// OpenAI's penalties: logit -= frequency * count + presence, over the generated tokens only.
TEST(SamplerPenalties, PresenceAndFrequencyCountOnlyGeneratedTokens) {
  SamplerParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  Sampler s(p);
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 4.0f};
  // Token 3 was generated twice: 4 - 2 * 1 - 0.5 = 1.5, below token 2.
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{3, 3}, 2), 2);
  // Generated once (the first 3 was the prompt's): 4 - 1 - 0.5 = 2.5, still the best.
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{3, 3}, 1), 3);
  // In the prompt only (generated = 0): no penalty.
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{3, 3, 3}, 0), 3);
  // Negative values encourage repetition.
  SamplerParams q = p;
  q.frequency_penalty = -2.0f;
  q.presence_penalty = 0;
  Sampler r(q);
  EXPECT_EQ(r.sample(logits, std::vector<int32_t>{1, 1}, 2), 1);  // 1 + 2 * 2 = 5
  SamplerParams bad = p;
  bad.presence_penalty = 2.5f;
  EXPECT_THROW(bad.validate(), Error);
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// OpenAI's logit_bias: added to the logit before anything else; -inf bans.
TEST(SamplerLogitBias, IsAddedToTheLogitAndMinusInfinityBans) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 4.0f};
  SamplerParams p = plain(0);
  p.logit_bias = {{3, -2.5f}, {1, 0.75f}};  // 4 - 2.5 = 1.5 < 2; 1 + 0.75 = 1.75 < 2
  EXPECT_EQ(Sampler(p).sample(logits, {}), 2);
  p.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(Sampler(p).sample(logits, {}), 0);
  // At a temperature, the draws follow the softmax of the biased logits.
  SamplerParams t = plain(1.0f, 77);
  t.logit_bias = {{3, -4.0f}, {0, 1.0f}};  // logits become 1, 1, 2, 0
  std::vector<double> want = {std::exp(1.0), std::exp(1.0), std::exp(2.0), std::exp(0.0)};
  double sum = 0;
  for (double v : want) sum += v;
  for (double& v : want) v /= sum;
  Sampler s(t);
  const int draws = 20000;
  EXPECT_LT(chi_square(histogram(s, logits, draws), want, draws), 20.0);
  // A banned token is never drawn, even as the best.
  SamplerParams ban = plain(1.0f, 3);
  ban.logit_bias = {{3, -std::numeric_limits<float>::infinity()}};
  Sampler b(ban);
  EXPECT_EQ(histogram(b, logits, 2000)[3], 0);
  SamplerParams greedy_ban = plain(0);
  greedy_ban.logit_bias = ban.logit_bias;
  EXPECT_EQ(Sampler(greedy_ban).sample(logits, {}), 2);
  // An id past the logits has nothing to bias.
  SamplerParams past = plain(0);
  past.logit_bias = {{99, 100.0f}};
  EXPECT_EQ(Sampler(past).sample(logits, {}), 3);
}

TEST(SamplerLogitBias, NothingLeftToSampleIsAnError) {
  for (float temp : {0.0f, 1.0f}) {
    SamplerParams p = plain(temp);
    for (int32_t id = 0; id < 4; ++id) p.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
    Sampler s(p);
    try {
      s.sample(std::vector<float>{0, 1, 2, 3}, {});
      ADD_FAILURE() << "sampled with every token banned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("every logit is -infinity"), std::string::npos) << e.what();
    }
  }
  SamplerParams bad = plain(0);
  bad.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(bad.validate(), Error);
  bad.logit_bias = {{1, NAN}};
  EXPECT_THROW(bad.validate(), Error);
  bad.logit_bias = {{1, INFINITY}};
  EXPECT_THROW(bad.validate(), Error);
}

// Logits that hold NaN (a model whose weights or activations overflowed)
// would make any pick arbitrary: an error, greedy or not.
TEST(Sampler, LogitsThatAreNotFiniteAreAnError) {
  for (float bad : {NAN, INFINITY}) {
    for (float temp : {0.0f, 0.8f}) {
      Sampler s(plain(temp));
      try {
        s.sample(std::vector<float>{0.5f, bad, 1.0f}, {});
        ADD_FAILURE() << "sampled from " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the model's logits are not finite"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("token 1 of 3"), std::string::npos) << e.what();
      }
    }
  }
  // -inf is a logit like any other (a banned token).
  Sampler s(plain(0));
  EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, 1.0f}, {}), 1);
}

}  // namespace
}  // namespace tally
