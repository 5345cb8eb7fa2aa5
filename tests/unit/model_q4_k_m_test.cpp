// The forward pass on a K-quant file against llama.cpp on the same file:
// SmolLM2-135M-Instruct requantized to Q4_K_M by llama-quantize (Q4_K and Q6_K
// feed-forward down projections, Q5_0 and Q8_0 elsewhere), which runs the
// row-group K-quant and Q5_0 kernels on real weights. The file is not
// downloaded but derived (test_model_path.h: derived_model_path); the
// reference comes from scripts/fixtures/make_kquant_fixtures.py. Without the
// file these tests skip, saying how to make it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "kernels/matmul.h"
#include "llama_cpp_reference.h"
#include "model_test_support.h"

namespace {

constexpr const char* kFile = "SmolLM2-135M-Instruct.Q4_K_M.gguf";

// Why the file cannot be used ("" when it can): absent, or not the file the
// fixtures were made on.
std::string unusable_reason() {
  const std::string path = tally_test::derived_model_path(kFile);
  if (path.empty())
    return std::string(kFile) + " not found in $TALLY_DERIVED_MODELS or $TALLY_HOME/models; make it with "
           "llama-quantize --allow-requantize <default model> <that folder>/" + kFile +
           " Q4_K_M (scripts/fixtures/make_kquant_fixtures.py --quantize PATH/llama-quantize)";
  const auto fx = tally_test::load_fixture("model_q4_k_m/perplexity.json");
  std::error_code ec;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (bytes != fx["model_bytes"].get<int64_t>())
    return path + " has " + std::to_string(bytes) + " bytes, not the " + std::to_string(fx["model_bytes"].get<int64_t>()) +
           " of the file the fixtures were made on (sha256 " + fx["model_sha256"].get<std::string>() +
           "): another llama-quantize version? Regenerate with scripts/fixtures/make_kquant_fixtures.py";
  return "";
}

const tally::Model* q4_k_m() {
  static std::unique_ptr<tally::Model> model = [] {
    return unusable_reason().empty() ? tally::Model::load(tally_test::derived_model_path(kFile)) : nullptr;
  }();
  return model.get();
}

}  // namespace

#define TALLY_NEED_Q4_K_M()                                                  \
  do {                                                                      \
    if (q4_k_m() == nullptr) {                                              \
      if (tally_test::derived_models_required()) FAIL() << unusable_reason(); \
      GTEST_SKIP() << unusable_reason();                                    \
    }                                                                       \
  } while (0)

// The file holds the tensor types its fixtures recorded, and every matrix is
// in the layout of its fast kernels.
TEST(ModelQ4KM, MatricesAreInTheFastLayouts) {
  TALLY_NEED_Q4_K_M();
  const auto fx = tally_test::load_fixture("model_q4_k_m/perplexity.json");
  std::map<std::string, int> types;
  for (const auto& t : q4_k_m()->file().tensors()) ++types[std::string(tally::dtype_name(t.type))];
  for (const auto& [name, count] : fx["tensor_types"].items()) EXPECT_EQ(types[name], count.get<int>()) << name;
  const tally::Model& m = *q4_k_m();
  std::map<tally::DType, int> seen;
  for (int64_t l = 0; l < m.config().n_layer; ++l) {
    const auto& L = m.layer(l);
    for (const tally::WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      ++seen[w->type];
      EXPECT_NE(w->layout, tally::RowLayout::Native) << "layer " << l << " " << tally::dtype_name(w->type);
    }
  }
  EXPECT_GT(seen[tally::DType::Q4_K], 0);
  EXPECT_GT(seen[tally::DType::Q6_K], 0);
  EXPECT_GT(seen[tally::DType::Q5_0], 0);
}

TEST(ModelQ4KM, GreedyMatchesLlamaCpp) {
  TALLY_NEED_Q4_K_M();
  tally_test::expect_greedy_matches_llama_cpp(*q4_k_m(), tally_test::load_fixture("model_q4_k_m/llama_cpp_greedy.json"));
}

TEST(ModelQ4KM, PerplexityWithinOnePercentOfLlamaCpp) {
  TALLY_NEED_Q4_K_M();
  const auto fx = tally_test::load_fixture("model_q4_k_m/perplexity.json");
  const tally::Tokenizer tok = tally::Tokenizer::from_gguf(q4_k_m()->file());
  const double ppl = tally_test::perplexity_of_fixture_text(*q4_k_m(), tok, fx);
  const double ref = fx["llama_cpp"]["ppl"].get<double>();
  std::printf("perplexity on the Q4_K_M file: tally %.4f, llama.cpp %.4f (%+.2f%%)\n", ppl, ref, 100 * (ppl / ref - 1));
  EXPECT_NEAR(ppl, ref, 0.01 * ref);
}
