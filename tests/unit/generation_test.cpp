// runtime/generation: what a generated sequence may emit. Ids without a token
// (the rows a converter pads a vocabulary with, type UNUSED) are never
// generated, whatever their logits and the sampling.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "runtime/generation.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tally {
namespace {

// A byte-level vocabulary of the 256 byte tokens, then two padding rows.
test::OwnedGguf padded_vocab() {
  std::vector<test::Meta> tokens, types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(test::m_str(byte_unicode::byte_to_utf8(static_cast<uint8_t>(b))));
    types.push_back(test::m_i32(1));
  }
  for (const char* pad : {"[PAD256]", "[PAD257]"}) {
    tokens.push_back(test::m_str(pad));
    types.push_back(test::m_i32(5));
  }
  test::GgufBuilder g;
  g.kv("tokenizer.ggml.model", test::m_str("gpt2"))
      .kv("tokenizer.ggml.pre", test::m_str("gpt-2"))
      .kv("tokenizer.ggml.tokens", test::m_array(test::kString, tokens))
      .kv("tokenizer.ggml.token_type", test::m_array(test::kI32, types))
      .kv("tokenizer.ggml.merges", test::m_strings({"a b"}));
  return test::gguf_from_bytes(g.build(), "padded.gguf");
}

TEST(Generation, PaddingIdsAreNeverGenerated) {
  const auto g = padded_vocab();
  const Tokenizer tok = Tokenizer::from_gguf(*g);
  EXPECT_EQ(tok.unused_ids(), (std::vector<int32_t>{256, 257}));
  std::vector<float> logits(258, 0.0f);
  logits['x'] = 5.0f;
  logits[256] = 20.0f;  // the best by far, but no text stands for it
  logits[257] = 19.0f;
  for (float temp : {0.0f, 1.0f, 2.0f}) {
    GenerationParams p;
    p.sampling.temperature = temp;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1;
    p.sampling.min_p = 0;
    p.sampling.logit_bias = {{256, 100.0f}};  // a caller's bias cannot bring one back
    p.max_tokens = -1;
    Generation gen(p, &tok);
    std::vector<int32_t> history = {'a'};
    for (int i = 0; i < 200; ++i) {
      const auto e = gen.step(logits, history, 1000);
      ASSERT_TRUE(e.has_value());
      ASSERT_LT(e->token, 256) << "temperature " << temp;
      history.push_back(gen.next());
    }
    if (temp == 0.0f) {
      EXPECT_EQ(history.back(), 'x');
    }
  }
  // Without a tokenizer there is nothing to tell padding from tokens.
  GenerationParams p;
  p.sampling.temperature = 0;
  Generation raw(p, nullptr);
  EXPECT_EQ(raw.step(logits, std::vector<int32_t>{0}, 10)->token, 256);
}

}  // namespace
}  // namespace tally
