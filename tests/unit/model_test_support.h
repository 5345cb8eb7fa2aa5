#pragma once
// Shared setup for tests that run the tests' model (smollm2:135m): one load per process,
// a skip (or, with TALLY_REQUIRE_MODEL=1, a failure) when it is not installed,
// and the JSON fixtures made by scripts/fixtures/make_model_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"
#include "test_model_path.h"
#include "tokenizer/tokenizer.h"

namespace tally_test {

inline const tally::Model* shared_model() {
  static std::unique_ptr<tally::Model> model = [] {
    const std::string p = test_model_path();
    return p.empty() ? nullptr : tally::Model::load(p);
  }();
  return model.get();
}

inline const tally::Tokenizer& shared_tokenizer() {
  static tally::Tokenizer tok = tally::Tokenizer::from_gguf(shared_model()->file());
  return tok;
}

// The logits of every position of `ids` (n_vocab each), from one session.
inline std::vector<std::vector<float>> all_logits(const tally::Model& m, const std::vector<int32_t>& ids,
                                                  int64_t n_ctx) {
  tally::SessionOptions o;
  o.n_ctx = n_ctx;
  o.all_logits = true;
  tally::Session s(m, o);
  const int64_t V = m.config().n_vocab;
  std::vector<std::vector<float>> out;
  s.append(ids, [&](int64_t, const float* l, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) out.emplace_back(l + r * V, l + (r + 1) * V);
  });
  return out;
}

// |ours - reference| over a reference's largest logits ([[id, logit], ...]).
struct TopDiffs {
  double worst = 0, sum = 0;
  int64_t n = 0;
  void add(const std::vector<float>& ours, const nlohmann::json& top) {
    for (const auto& pair : top) {
      const double x = std::fabs(ours[pair[0].get<size_t>()] - pair[1].get<double>());
      worst = std::max(worst, x);
      sum += x;
      ++n;
    }
  }
  double mean() const { return sum / static_cast<double>(n); }
};

inline nlohmann::json load_fixture(const std::string& rel) {
  std::ifstream in(std::string(TALLY_FIXTURES_DIR) + "/" + rel);
  if (!in) throw std::runtime_error("missing fixture " + rel);
  return nlohmann::json::parse(in);
}

}  // namespace tally_test

// Skips the test (or fails it when the model is required) if the default model is absent.
#define TALLY_NEED_MODEL()                                                                 \
  do {                                                                                     \
    if (tally_test::shared_model() == nullptr) {                                           \
      if (tally_test::model_required()) FAIL() << "smollm2:135m not installed";             \
      GTEST_SKIP() << "smollm2:135m not installed (tally pull smollm2:135m)";         \
    }                                                                                      \
  } while (0)
