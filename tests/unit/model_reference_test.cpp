// The forward pass against references computed by other engines on the same
// GGUF: HF transformers (weights dequantized to f32) and llama.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "llama_cpp_reference.h"
#include "model_test_support.h"
#include "runtime/generator.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"

using namespace tally;
using tally_test::load_fixture;
using tally_test::shared_model;

namespace {

std::vector<std::vector<float>> all_logits(const std::vector<int32_t>& ids) {
  return tally_test::all_logits(*shared_model(), ids, 512);
}

}  // namespace

// Our logits differ from an f32 reference by the 8-bit activation quantization
// (as in llama.cpp) and the f16 cache. llama.cpp itself sits at up to 1.09 from
// HF on these top-10 logits (1.77 over all logits) and agrees on 169 of 179
// argmaxes (hf_logits.json, llama_cpp_comparison); over these 1790 logits its
// mean |diff| is 0.181 and its 99th percentile 0.69. Ours: mean 0.16-0.18 and
// 99th percentile 0.65-0.86 at every kernel level. The maximum is one logit
// (chat, position 19, token 30) where a last-bit change anywhere crosses 8-bit
// activation rounding steps: it moves between 1.4 and 2.0 from one correct
// kernel to another (2.6 when the Q4_1 mins were summed in a chain of their
// own), so the tail is bounded by its 99th percentile and the maximum only
// loosely.
TEST(ModelReference, LogitsMatchHfTransformers) {
  TALLY_NEED_MODEL();
  const auto fx = load_fixture("model/hf_logits.json");
  double worst = 0, sum_abs = 0;
  std::string worst_at;
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
        if (d > worst) {
          worst = d;
          worst_at = p["name"].get<std::string>() + " position " + std::to_string(pos) + " token " +
                     std::to_string(pair[0].get<int>());
        }
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
  std::printf("HF f32 reference: %lld logits compared, max |diff| %.4f (%s), 99th percentile %.4f, mean |diff| %.4f, "
              "top-1 agreement %lld/%lld (%lld decisive)\n",
              (long long)n, worst, worst_at.c_str(), p99, mean, (long long)top1_agree, (long long)positions,
              (long long)decisive);
  EXPECT_LT(mean, 0.25);
  EXPECT_LT(p99, 1.0);
  EXPECT_LT(worst, 2.5);
  EXPECT_GE(top1_agree * 100, positions * 92);
}

// Greedy decoding against llama.cpp, near-ties aside (llama_cpp_reference.h).
TEST(ModelReference, GreedyMatchesLlamaCpp) {
  TALLY_NEED_MODEL();
  tally_test::expect_greedy_matches_llama_cpp(*shared_model(), load_fixture("model/llama_cpp_greedy.json"));
}

TEST(ModelPerplexity, WithinOnePercentOfLlamaCpp) {
  TALLY_NEED_MODEL();
  const auto fx = load_fixture("model/perplexity.json");
  const double ppl = tally_test::perplexity_of_fixture_text(*shared_model(), tally_test::shared_tokenizer(), fx);
  const double ref = fx["llama_cpp"]["ppl"].get<double>();
  std::printf("perplexity: tally %.4f, llama.cpp %.4f, HF f32 %.4f\n", ppl, ref,
              fx["hf_transformers"]["ppl"].get<double>());
  EXPECT_NEAR(ppl, ref, 0.01 * ref);
}
