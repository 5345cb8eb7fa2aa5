// The forward pass against references computed by other engines on the same
// GGUF: HF transformers (weights dequantized to f32) and llama.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model_test_support.h"
#include "runtime/generator.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"

using namespace tally;
using tally_test::load_fixture;
using tally_test::shared_model;

namespace {

std::vector<std::vector<float>> all_logits(const std::vector<int32_t>& ids) {
  SessionOptions o;
  o.n_ctx = 512;
  o.all_logits = true;
  Session s(*shared_model(), o);
  const int64_t V = shared_model()->config().n_vocab;
  std::vector<std::vector<float>> out;
  s.append(ids, [&](int64_t, const float* l, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) out.emplace_back(l + r * V, l + (r + 1) * V);
  });
  return out;
}

}  // namespace

// Our logits differ from an f32 reference by the 8-bit activation quantization
// (as in llama.cpp) and the f16 cache. llama.cpp itself sits at up to 1.09 from
// HF on these top-10 logits (1.77 over all logits) and agrees on 169 of 179
// argmaxes (hf_logits.json, llama_cpp_comparison); over these 1790 logits its
// mean |diff| is 0.181 and its 99th percentile 0.69. Ours: mean 0.16-0.18 and
// 99th percentile 0.65-0.84 at every kernel level. The maximum is one logit
// (chat, position 19, token 30) where a last-bit change anywhere crosses 8-bit
// activation rounding steps: it moves between 1.4 and 2.0 from one correct
// kernel to another, so the tail is bounded by its 99th percentile and the
// maximum only loosely.
TEST(ModelReference, LogitsMatchHfTransformers) {
  TALLY_NEED_MODEL();
  const auto fx = load_fixture("model/hf_logits.json");
  double worst = 0, sum_abs = 0;
  std::vector<double> diffs;
  int64_t n = 0, top1_agree = 0, positions = 0, decisive = 0;
  for (const auto& p : fx["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto ours = all_logits(ids);
    ASSERT_EQ(ours.size(), p["top10"].size());
    for (size_t pos = 0; pos < ours.size(); ++pos) {
      const auto& top = p["top10"][pos];
      for (const auto& pair : top) {
        const double d = std::fabs(ours[pos][pair[0].get<int>()] - pair[1].get<double>());
        worst = std::max(worst, d);
        diffs.push_back(d);
        sum_abs += d;
        ++n;
      }
      const int ref_top1 = top[0][0].get<int>();
      const double margin = top[0][1].get<double>() - top[1][1].get<double>();
      const int our_top1 = static_cast<int>(std::max_element(ours[pos].begin(), ours[pos].end()) - ours[pos].begin());
      ++positions;
      top1_agree += our_top1 == ref_top1;
      if (margin > 0.5) {  // a clear winner must be ours too
        ++decisive;
        EXPECT_EQ(our_top1, ref_top1) << p["name"] << " position " << pos << " margin " << margin;
      }
    }
  }
  const double mean = sum_abs / n;
  std::sort(diffs.begin(), diffs.end());
  const double p99 = diffs[diffs.size() * 99 / 100];
  RecordProperty("max_abs_diff", std::to_string(worst));
  RecordProperty("mean_abs_diff", std::to_string(mean));
  std::printf("HF f32 reference: %lld logits compared, max |diff| %.4f, 99th percentile %.4f, mean |diff| %.4f, "
              "top-1 agreement %lld/%lld (%lld decisive)\n",
              (long long)n, worst, p99, mean, (long long)top1_agree, (long long)positions, (long long)decisive);
  EXPECT_LT(mean, 0.25);
  EXPECT_LT(p99, 1.0);
  EXPECT_LT(worst, 2.5);
  EXPECT_GE(top1_agree * 100, positions * 92);
}

// Greedy decoding follows llama.cpp's argmax until a near-tie: where its
// top-2 margin is below kTieMargin, rounding differences between two correct
// engines may pick either token (HF f32 and llama.cpp part ways at such steps
// too). So: (1) free-running, our tokens equal llama.cpp's until a step
// where its choice was a near-tie (never part at a decisive step); (2) teacher-forced on llama.cpp's continuation, our argmax equals
// its choice at every step that is not a near-tie.
TEST(ModelReference, GreedyMatchesLlamaCpp) {
  TALLY_NEED_MODEL();
  constexpr double kTieMargin = 0.5;  // of the order of the engines' logit differences
  const auto fx = load_fixture("model/llama_cpp_greedy.json");
  const int64_t V = shared_model()->config().n_vocab;
  for (const auto& p : fx["prompts"]) {
    const std::string name = p["name"];
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto expected = p["continuation"].get<std::vector<int32_t>>();
    size_t first_tie = expected.size();
    for (size_t j = 0; j < p["steps"].size(); ++j)
      if (p["steps"][j]["margin"].get<double>() < kTieMargin) {
        first_tie = j;
        break;
      }
    SessionOptions o;
    o.n_ctx = 512;
    Session s(*shared_model(), o);
    GenerateOptions g;
    g.max_tokens = static_cast<int64_t>(expected.size());
    g.sampling.temperature = 0;
    const GenerateResult r = generate(s, ids, g);
    size_t same = 0;
    while (same < expected.size() && same < r.tokens.size() && r.tokens[same] == expected[same]) ++same;
    // Where the two continuations part, llama.cpp's own choice must have been a near-tie.
    if (same < expected.size()) {
      const double m = p["steps"][same]["margin"].get<double>();
      EXPECT_LT(m, kTieMargin) << name << ": free-running, diverged from llama.cpp at step " << same
                               << ", where its choice was decisive (top-2 margin " << m << ")";
    }

    // Teacher forcing: all logits over prompt + llama.cpp's continuation.
    SessionOptions ao = o;
    ao.all_logits = true;
    Session t(*shared_model(), ao);
    std::vector<int32_t> full = ids;
    full.insert(full.end(), expected.begin(), expected.end());
    std::vector<int32_t> argmaxes;
    t.append(full, [&](int64_t, const float* l, int64_t rows) {
      for (int64_t i = 0; i < rows; ++i)
        argmaxes.push_back(static_cast<int32_t>(std::max_element(l + i * V, l + (i + 1) * V) - (l + i * V)));
    });
    size_t decisive = 0, agree = 0;
    for (size_t j = 0; j < expected.size(); ++j) {
      if (p["steps"][j]["margin"].get<double>() < kTieMargin) continue;
      ++decisive;
      const int32_t ours = argmaxes[ids.size() - 1 + j];
      agree += ours == expected[j];
      EXPECT_EQ(ours, expected[j]) << name << " step " << j << " (llama.cpp margin "
                                   << p["steps"][j]["margin"].get<double>() << ")";
    }
    std::printf("%s: free-running %zu of %zu tokens equal llama.cpp's (its first near-tie at step %zu); "
                "teacher-forced %zu of %zu decisive steps agree\n",
                name.c_str(), same, expected.size(), first_tie, agree, decisive);
  }
}

TEST(ModelPerplexity, WithinOnePercentOfLlamaCpp) {
  TALLY_NEED_MODEL();
  const auto fx = load_fixture("model/perplexity.json");
  std::ifstream in(std::string(TALLY_SOURCE_DIR) + "/" + fx["text_file"].get<std::string>(), std::ios::binary);
  ASSERT_TRUE(in);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = tally_test::shared_tokenizer().encode(text, false, false);
  ASSERT_EQ(static_cast<int64_t>(ids.size()), fx["n_text_tokens"].get<int64_t>());
  SessionOptions o;
  o.n_ctx = fx["ctx"].get<int64_t>();
  o.all_logits = true;
  Session s(*shared_model(), o);
  const PerplexityResult r = perplexity(s, ids, o.n_ctx);
  const double ref = fx["llama_cpp"]["ppl"].get<double>();
  std::printf("perplexity: tally %.4f, llama.cpp %.4f, HF f32 %.4f\n", r.ppl, ref,
              fx["hf_transformers"]["ppl"].get<double>());
  EXPECT_EQ(r.predictions, fx["n_tokens_scored"].get<int64_t>());
  EXPECT_NEAR(r.ppl, ref, 0.01 * ref);
}
