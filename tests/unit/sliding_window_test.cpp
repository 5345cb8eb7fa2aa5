// A window sliding past the context (Session::slide, KvCache::remove_positions)
// on the tiny synthetic decoder: moved positions keep their K/V; a moved key
// re-rotated to its new position equals the key computed there from scratch
// (layer 0's keys depend on the token and its position only); a stream of
// many times the window keeps its sinks, never holds more than the window,
// and leaves other sequences untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "session_helpers.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::expect_error;

TEST(SlidingWindow, RemovedPositionsShiftTheRestDownUnchanged) {
  KvCache c({1, 1, 4}, KvCacheOptions{64, 4, DType::F32, 1u << 20, true});
  const auto s = c.create_sequence();
  c.begin_write(s, 0, 20);
  for (int p = 0; p < 20; ++p) {
    const float k[4] = {float(p), 1, 2, 3}, v[4] = {-float(p), 0, 0, 0};
    c.store(0, s, p, k, v);
  }
  const auto other = c.fork(s);  // shares every block: the move must not reach it
  c.remove_positions(s, 2, 8, [](int64_t, float*) {});
  EXPECT_EQ(c.length(s), 12);
  float k[4], v[4];
  for (int p = 0; p < 12; ++p) {
    c.load(0, s, p, k, v);
    EXPECT_EQ(k[0], p < 2 ? p : p + 8) << p;
    EXPECT_EQ(v[0], -(p < 2 ? p : p + 8)) << p;
  }
  for (int p = 0; p < 20; ++p) {
    c.load(0, other, p, k, v);
    EXPECT_EQ(k[0], p) << "the fork saw the move at " << p;
  }
  expect_error([&] { c.remove_positions(s, 10, 5, [](int64_t, float*) {}); }, {"cannot remove positions [10, 15)"});
}

TEST(SlidingWindow, AMovedKeyEqualsTheKeyComputedAtItsNewPosition) {
  const auto tm = test::make_tiny_model();
  const auto& c = tm->model->config();
  const auto t = test::token_pattern(40);
  Session s(*tm->model, test::small_block_session(DType::F32, 40));
  s.append(t);
  const int64_t sinks = 4;
  EXPECT_EQ(s.slide(4, sinks), 8);  // 4 more do not fit in 40: one block of 8 goes
  EXPECT_EQ(s.length(), 32);
  // Position 20 now holds the token that was at 28, re-rotated by -8.
  std::vector<float> k(c.kv_dim()), v(c.kv_dim());
  s.read_kv(0, 20, k.data(), v.data());
  // From scratch: token t[28] at position 20 (any tokens before it: layer 0's K
  // does not look at them).
  std::vector<int32_t> fresh(t.begin(), t.begin() + 20);
  fresh.push_back(t[28]);
  Session f(*tm->model, test::small_block_session(DType::F32, 40));
  f.append(fresh);
  std::vector<float> fk(c.kv_dim()), fv(c.kv_dim());
  f.read_kv(0, 20, fk.data(), fv.data());
  for (int64_t i = 0; i < c.kv_dim(); ++i) {
    EXPECT_NEAR(k[i], fk[i], 1e-5 * (1 + std::fabs(fk[i]))) << "key value " << i;
    EXPECT_EQ(v[i], fv[i]) << "value " << i << " (values are not rotated)";
  }
  EXPECT_EQ(std::vector<int32_t>(s.tokens().begin(), s.tokens().begin() + 4), std::vector<int32_t>(t.begin(), t.begin() + 4));
}

TEST(SlidingWindow, AStreamKeepsItsSinksAndNeverOutgrowsTheWindow) {
  const auto tm = test::make_tiny_model();
  const auto prompt = test::token_pattern(10);
  Session s(*tm->model, test::small_block_session(DType::F16, 48));
  GenerateOptions g;
  g.max_tokens = 300;  // six windows' worth
  g.sinks = 4;
  g.sampling.temperature = 0.8f;
  g.sampling.seed = 5;
  int64_t longest = 0;
  const GenerateResult r = generate(s, prompt, g, [&](const Emission&) { longest = std::max(longest, s.length()); });
  EXPECT_EQ(r.tokens.size(), 300u);
  EXPECT_LE(longest, 48);
  EXPECT_GE(r.slid, 300 - 48);
  EXPECT_EQ(std::vector<int32_t>(s.tokens().begin(), s.tokens().begin() + 4),
            std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
  // Without sinks the start is gone too.
  Session z(*tm->model, test::small_block_session(DType::F16, 48));
  g.sinks = 0;
  generate(z, prompt, g);
  EXPECT_NE(std::vector<int32_t>(z.tokens().begin(), z.tokens().begin() + 4),
            std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
}

TEST(SlidingWindow, ImpossibleWindowsAreRefused) {
  const auto tm = test::make_tiny_model();
  Session s(*tm->model, test::small_block_session(DType::F32, 16));
  s.append(test::token_pattern(16));
  expect_error([&] { s.slide(1, 12); }, {"a window of 16 positions is too small for 12 sink tokens", "at least 21"});  // 12 + 8 + 1 > 16
  expect_error([&] { s.slide(1, -1); }, {"the number of sink tokens must be >= 0"});
  GenerateOptions g;
  g.max_tokens = -1;
  expect_error([&] { generate(s, test::token_pattern(1), g); }, {"no token limit needs a sliding window"});
}

}  // namespace
}  // namespace tally
