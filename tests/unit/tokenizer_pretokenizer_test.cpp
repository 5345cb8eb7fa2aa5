// The PCRE2 pre-tokenizer patterns against the splits of the Hugging Face
// `tokenizers` pre-tokenizers (tests/fixtures/tokenizer/pretokenizer.json,
// made by scripts/fixtures/make_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace tally {
namespace {

std::string show(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) {
    s += "[";
    for (char c : p) s += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : std::string(1, c);
    s += "]";
  }
  return s;
}

TEST(TokenizerPretokenizer, MatchesHuggingFaceSplits) {
  std::ifstream in(TALLY_FIXTURES_DIR "/tokenizer/pretokenizer.json");
  ASSERT_TRUE(in);
  const nlohmann::json fx = nlohmann::json::parse(in);
  size_t n = 0, passed = 0;
  for (const auto& c : fx["cases"]) {
    const auto pre = c["pre"].get<std::string>();
    const auto text = c["text"].get<std::string>();
    const auto expected = c["pieces"].get<std::vector<std::string>>();
    const Pretokenizer p(pre);
    std::vector<std::string_view> views;
    p.split(text, views);
    const std::vector<std::string> got(views.begin(), views.end());
    ++n;
    if (got == expected)
      ++passed;
    else
      ADD_FAILURE() << pre << ": \"" << text << "\"\n  expected: " << show(expected)
                    << "\n  got:      " << show(got);
  }
  EXPECT_EQ(passed, n);
  EXPECT_GE(n, 150u);
}

TEST(TokenizerPretokenizer, AliasesAndUnknownNames) {
  std::vector<std::string_view> a, b;
  Pretokenizer("starcoder").split("x=12 ab", a);
  Pretokenizer("smollm").split("x=12 ab", b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 5u);  // x, =, 1, 2, " ab"
  EXPECT_TRUE(Pretokenizer("llama-bpe").ignore_merges());
  EXPECT_FALSE(Pretokenizer("qwen2").ignore_merges());
  try {
    Pretokenizer p("jais");
    FAIL() << "accepted an unknown pre-tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'jais'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tally
