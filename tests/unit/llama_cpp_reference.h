#pragma once
// The checks against llama.cpp's reference fixtures (scripts/fixtures/), for
// any model file they were made on: greedy decoding and perplexity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace tally_test {

// Greedy decoding follows llama.cpp's argmax until a near-tie: where its
// top-2 margin is below kTieMargin, rounding differences between two correct
// engines may pick either token (HF f32 and llama.cpp part ways at such steps
// too). So: (1) free-running, our tokens equal llama.cpp's until a step
// where its choice was a near-tie (never part at a decisive step); (2)
// teacher-forced on llama.cpp's continuation, our argmax equals its choice at
// every step that is not a near-tie. fx: a llama_cpp_greedy.json.
inline void expect_greedy_matches_llama_cpp(const tally::Model& model, const nlohmann::json& fx,
                                            const char* prompts = "prompts", int64_t n_ctx = 512) {
  using namespace tally;
  constexpr double kTieMargin = 0.5;  // of the order of the engines' logit differences
  const int64_t V = model.config().n_vocab;
  for (const auto& p : fx[prompts]) {
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
    o.n_ctx = n_ctx;
    Session s(model, o);
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
    Session t(model, ao);
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

// Perplexity of the fixture's text in its windows (fx: a perplexity.json);
// returns ours, after checking the token and prediction counts.
inline double perplexity_of_fixture_text(const tally::Model& model, const tally::Tokenizer& tok,
                                         const nlohmann::json& fx) {
  using namespace tally;
  std::ifstream in(std::string(TALLY_SOURCE_DIR) + "/" + fx["text_file"].get<std::string>(), std::ios::binary);
  EXPECT_TRUE(in) << fx["text_file"];
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = tok.encode(text, false, false);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), fx["n_text_tokens"].get<int64_t>());
  SessionOptions o;
  o.n_ctx = fx["ctx"].get<int64_t>();
  o.all_logits = true;
  Session s(model, o);
  const PerplexityResult r = perplexity(s, ids, o.n_ctx);
  EXPECT_EQ(r.predictions, fx["n_tokens_scored"].get<int64_t>());
  return r.ppl;
}

}  // namespace tally_test
