// Qwen2 (q/k/v biases, half-split RoPE) and Qwen3 (q/k norms, half-split
// RoPE) against HF transformers, on random-weight models that
// scripts/fixtures/make_random_models.py builds with transformers and converts
// with llama.cpp's convert_hf_to_gguf.py (f16, q8_0) and llama-quantize
// (Q4_K_M): one layer, GQA 4:2, hidden 256; qwen2 with an untied output
// matrix, qwen3 tied. The weights are rounded to f16 before transformers runs,
// so the f16 file holds exactly what the reference computed with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model_test_support.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string file(const std::string& arch, const std::string& format) {
  return std::string(TALLY_FIXTURES_DIR) + "/random_models/" + arch + "-" + format + ".gguf";
}

std::vector<std::vector<float>> all_logits(const tally::Model& m, const std::vector<int32_t>& ids) {
  return tally_test::all_logits(m, ids, 256);
}

struct Case {
  const char* arch;
  const char* format;
  // Bounds on |ours - transformers| over the reference's largest logits at
  // every position (the logits' standard deviation is about 4), against the
  // model with this file's own weights (dequantized by gguf-py): what remains
  // is tally's 8-bit activations and f16 cache. `mean_vs_model` bounds the
  // mean against the f32 model the file was made from, weights' rounding
  // included. Measured: 0.19-0.26 max and 0.04-0.05 mean against the file's
  // weights for every format (the K-quant and Q8_0 kernels add nothing
  // visible); against the f32 model, means of 0.04-0.05 (f16), 0.06-0.07
  // (q8_0) and 0.49-0.52 (Q4_K_M: 4-bit weights move logits by about an
  // eighth of their spread).
  double max_vs_file, mean_vs_file, mean_vs_model;
};

class ModelQwen : public testing::TestWithParam<Case> {};

}  // namespace

TEST_P(ModelQwen, ReadsTheArchitecture) {
  const Case c = GetParam();
  const auto m = tally::Model::load(file(c.arch, c.format));
  const auto& cfg = m->config();
  EXPECT_EQ(cfg.arch->name, c.arch);
  EXPECT_EQ(cfg.arch->rope_pairing, tally::RopePairing::HalfSplit);
  EXPECT_EQ(cfg.n_layer, 1);
  EXPECT_EQ(cfg.n_head, 4);
  EXPECT_EQ(cfg.n_kv_head, 2);
  EXPECT_EQ(cfg.head_dim, 64);
  EXPECT_FLOAT_EQ(cfg.rope_base, 1e6f);
  EXPECT_EQ(m->tied_output(), std::string(c.arch) == "qwen3");
  EXPECT_EQ(m->layer(0).q_bias.size(), std::string(c.arch) == "qwen2" ? 256u : 0u);
  EXPECT_EQ(m->layer(0).q_norm.size(), std::string(c.arch) == "qwen3" ? 64u : 0u);
}

TEST_P(ModelQwen, TokenizesAsHfTokenizers) {
  const Case c = GetParam();
  const auto m = tally::Model::load(file(c.arch, c.format));
  const auto fx = tally_test::load_fixture(std::string("random_models/") + c.arch + "-hf_logits.json");
  const tally::Tokenizer tok = tally::Tokenizer::from_gguf(m->file());
  for (const auto& p : fx["prompts"])
    EXPECT_EQ(tok.encode(p["text"].get<std::string>(), true, true), p["ids"].get<std::vector<int32_t>>())
        << p["name"].get<std::string>();
  // Its ChatML template is read from the file.
  const std::vector<tally::ChatMessage> hi = {{"user", "Hi"}};
  EXPECT_EQ(tally::ChatTemplate::from_gguf(m->file()).render(hi, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_P(ModelQwen, LogitsMatchTransformers) {
  const Case c = GetParam();
  const auto m = tally::Model::load(file(c.arch, c.format));
  const auto fx = tally_test::load_fixture(std::string("random_models/") + c.arch + "-hf_logits.json");
  const std::string on_file = c.format == std::string("f16") ? "top10" : std::string("top5_") + c.format + "_weights";
  tally_test::TopDiffs vs_file, vs_model;
  int64_t decisive = 0;
  for (const auto& p : fx["prompts"]) {
    const auto ours = all_logits(*m, p["ids"].get<std::vector<int32_t>>());
    ASSERT_EQ(ours.size(), p[on_file].size());
    for (size_t pos = 0; pos < ours.size(); ++pos) {
      const auto& top = p[on_file][pos];
      vs_file.add(ours[pos], top);
      vs_model.add(ours[pos], p["top10"][pos]);
      // Where the reference's winner leads by more than twice the bound, it is ours too.
      if (top[0][1].get<double>() - top[1][1].get<double>() > 2 * c.max_vs_file) {
        ++decisive;
        const auto best = std::max_element(ours[pos].begin(), ours[pos].end()) - ours[pos].begin();
        EXPECT_EQ(best, top[0][0].get<int>()) << p["name"] << " position " << pos;
      }
    }
  }
  std::printf("%s %s: against its own weights max |diff| %.4f, mean %.4f (%lld logits); against the f32 model "
              "max %.4f, mean %.4f; %lld decisive positions\n",
              c.arch, c.format, vs_file.worst, vs_file.mean(), static_cast<long long>(vs_file.n), vs_model.worst,
              vs_model.mean(), static_cast<long long>(decisive));
  EXPECT_LE(vs_file.worst, c.max_vs_file);
  EXPECT_LE(vs_file.mean(), c.mean_vs_file);
  EXPECT_LE(vs_model.mean(), c.mean_vs_model);
  EXPECT_GT(decisive, 50);
}

INSTANTIATE_TEST_SUITE_P(Files, ModelQwen,
                         testing::Values(Case{"qwen2", "f16", 0.4, 0.08, 0.08}, Case{"qwen2", "q8_0", 0.4, 0.08, 0.12},
                                         Case{"qwen2", "q4_k_m", 0.4, 0.08, 0.75}, Case{"qwen3", "f16", 0.4, 0.08, 0.08},
                                         Case{"qwen3", "q8_0", 0.4, 0.08, 0.12}, Case{"qwen3", "q4_k_m", 0.4, 0.08, 0.75}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.arch) + "_" + i.param.format;
                         });
