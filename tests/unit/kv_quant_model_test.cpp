// The quantized KV cache on the default model (SmolLM2-135M): against the f16
// cache, on chapter 1 of Pride and Prejudice (one window of 512 tokens), the
// next-token distributions stay close (mean KL divergence under a bound set
// from a measurement, and the top-1 token equal to f16's almost everywhere).
//
// Measured (this tree, AVX2, 511 predictions), mean KL against f16 in nats:
// f32 3.8e-3 (the floor: f16's own rounding), q8_0 5.8e-3 (top-1 equal to
// f16's 96.1%), q4_0 0.26 (top-1 76.9%). The bounds are about twice those.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "lab/kv_quant_quality.h"
#include "model_test_support.h"

namespace tally {
namespace {

// Bounds: about twice the measured values (see the header comment).
constexpr double kMaxMeanKlQ8 = 1.2e-2;
constexpr double kMaxMeanKlQ4 = 0.5;
constexpr double kMinTop1Q8 = 0.93;

std::string chapter1() {
  std::ifstream in(std::string(TALLY_FIXTURES_DIR) + "/text/pride_and_prejudice_ch1.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(KvQuantModel, NextTokenDistributionsStayCloseToF16) {
  TALLY_NEED_MODEL();
  const auto ids = tally_test::shared_tokenizer().encode(chapter1(), true, false);
  ASSERT_GE(ids.size(), 512u);
  KvQuantOptions o;
  o.contexts = {512};
  o.tokens = 512;
  o.n_threads = 2;
  o.prompts = {"The capital of France is", "Once upon a time, in a small village by the sea,"};
  o.greedy_tokens = 32;
  const KvQuantReport r = measure_kv_quant(*tally_test::shared_model(), tally_test::shared_tokenizer(), ids, o);
  for (const auto& row : r.rows) {
    SCOPED_TRACE(std::string(dtype_name(row.type)));
    if (row.type == DType::F16) {
      EXPECT_EQ(row.kl_vs_f16, 0.0);
    } else if (row.type == DType::Q8_0) {
      EXPECT_LT(row.kl_vs_f16, kMaxMeanKlQ8);
      EXPECT_GT(row.top1_vs_f16, kMinTop1Q8);
    } else if (row.type == DType::Q4_0) {
      EXPECT_LT(row.kl_vs_f16, kMaxMeanKlQ4);
    }
    RecordProperty(std::string("kl_vs_f16_") + std::string(dtype_name(row.type)), std::to_string(row.kl_vs_f16));
    std::printf("%s: ppl %.4f, mean KL vs f16 %.3e (max %.3e), vs f32 %.3e, top-1 = f16 %.2f%%\n",
                std::string(dtype_name(row.type)).c_str(), row.ppl, row.kl_vs_f16, row.max_kl_vs_f16, row.kl_vs_f32,
                100 * row.top1_vs_f16);
  }
  // Greedy text is printed, not asserted: where two caches part is a near tie
  // of the f16 run (f32 itself parts from f16 after 5-32 tokens), so the
  // prefix length moves with any last-bit change of the kernels; the
  // distributions above are what is bounded.
  for (const auto& g : r.greedy)
    std::printf("%s | %s: %lld of %lld equal to f16\n", g.prompt.c_str(), std::string(dtype_name(g.type)).c_str(),
                static_cast<long long>(g.agree_prefix), static_cast<long long>(g.generated));
}

}  // namespace
}  // namespace tally
