// Unit tests of the tokenizer pieces: UTF-8 helpers, the byte alphabet,
// BPE/SentencePiece on tiny synthetic vocabularies, special tokens, errors,
// and the streaming decoder.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"
#include "tokenizer_test_util.h"

namespace tally {
namespace {

using test::GgufBuilder;
using test::Meta;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Meta strings(const std::vector<std::string>& ss) {
  std::vector<Meta> e;
  for (const auto& s : ss) e.push_back(test::m_str(s));
  return test::m_array(test::kString, e);
}
// A u32 value written directly (test::m_u32 trips a GCC 12 -Wstringop-overflow
// false positive when inlined here).
Meta u32(uint32_t v) {
  Meta m{test::kU32, std::vector<uint8_t>(sizeof v)};
  std::memcpy(m.bytes.data(), &v, sizeof v);
  return m;
}
Meta i32s(const std::vector<int32_t>& v) {
  std::vector<Meta> e;
  for (int32_t x : v) e.push_back(test::m_i32(x));
  return test::m_array(test::kI32, e);
}
Meta f32s(const std::vector<float>& v) {
  std::vector<Meta> e;
  for (float x : v) e.push_back(test::m_f32(x));
  return test::m_array(test::kF32, e);
}

// A byte-level BPE vocabulary: ids 0..255 are the byte characters (in byte
// order), then merged tokens, then special tokens.
struct TinyBpe {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::string pre = "gpt-2";
  bool with_merges = true;

  TinyBpe() {
    for (int b = 0; b < 256; ++b) {
      tokens.emplace_back(byte_unicode::byte_to_utf8(static_cast<uint8_t>(b)));
      types.push_back(1);
    }
    // Merges in rank order; each result is added as a token.
    for (const char* m : {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"}) {
      merges.emplace_back(m);
      std::string joined = m;
      joined.erase(joined.find(' '), 1);
      tokens.push_back(joined);
      types.push_back(1);
    }
    tokens.emplace_back("<|end|>");  // control
    types.push_back(3);
    tokens.emplace_back("<|end|>!");  // a longer control token sharing the prefix
    types.push_back(3);
    tokens.emplace_back("<think>");  // user-defined
    types.push_back(4);
  }
  int32_t id(const std::string& t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int32_t>(i);
    return -1;
  }
  GgufBuilder builder() const {
    GgufBuilder b;
    b.kv("tokenizer.ggml.model", test::m_str("gpt2"))
        .kv("tokenizer.ggml.pre", test::m_str(pre))
        .kv("tokenizer.ggml.tokens", strings(tokens))
        .kv("tokenizer.ggml.token_type", i32s(types))
        .kv("tokenizer.ggml.eos_token_id", u32(static_cast<uint32_t>(id("<|end|>"))));
    if (with_merges) b.kv("tokenizer.ggml.merges", strings(merges));
    return b;
  }
  test::OwnedGguf gguf() const { return test::gguf_from_bytes(builder().build(), "tiny-bpe.gguf"); }
};

// A SentencePiece vocabulary with byte fallback.
struct TinySpm {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  std::optional<bool> add_space_prefix;

  TinySpm() {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      tokens.emplace_back(buf);
      types.push_back(6);
      scores.push_back(0);
    }
    // ab beats ▁a, so "▁ab" is built as ▁ + ab.
    for (auto [t, s] : std::vector<std::pair<std::string, float>>{
             {"\xE2\x96\x81", -1}, {"a", -2}, {"b", -2}, {"ab", -3}, {"\xE2\x96\x81" "a", -4},
             {"\xE2\x96\x81" "ab", -5}, {"\xC3\xA9", -6}}) {
      tokens.push_back(t);
      types.push_back(1);
      scores.push_back(s);
    }
  }
  int32_t id(const std::string& t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int32_t>(i);
    return -1;
  }
  test::OwnedGguf gguf() const {
    GgufBuilder b;
    b.kv("tokenizer.ggml.model", test::m_str("llama"))
        .kv("tokenizer.ggml.tokens", strings(tokens))
        .kv("tokenizer.ggml.token_type", i32s(types))
        .kv("tokenizer.ggml.scores", f32s(scores))
        .kv("tokenizer.ggml.bos_token_id", u32(1))
        .kv("tokenizer.ggml.eos_token_id", u32(2))
        .kv("tokenizer.ggml.unknown_token_id", u32(0));
    if (add_space_prefix) b.kv("tokenizer.ggml.add_space_prefix", test::m_bool(*add_space_prefix));
    return test::gguf_from_bytes(b.build(), "tiny-spm.gguf");
  }
};

// ---- UTF-8 ----------------------------------------------------------------

TEST(TokenizerUtf8, Decode) {
  auto d = utf8::decode("\xF0\x9F\x98\x80");
  EXPECT_EQ(d.status, utf8::Status::Ok);
  EXPECT_EQ(d.cp, 0x1F600u);
  EXPECT_EQ(d.len, 4u);
  EXPECT_EQ(utf8::decode("\xF0\x9F").status, utf8::Status::Incomplete);
  EXPECT_EQ(utf8::decode("\xC0\x80").status, utf8::Status::Invalid);          // overlong
  EXPECT_EQ(utf8::decode("\xED\xA0\x80").status, utf8::Status::Invalid);      // surrogate
  EXPECT_EQ(utf8::decode("\xF4\x90\x80\x80").status, utf8::Status::Invalid);  // > U+10FFFF
  EXPECT_EQ(utf8::decode("\x80").status, utf8::Status::Invalid);
  EXPECT_EQ(utf8::decode("\xE2\x82" "A").len, 2u);  // maximal ill-formed subpart
}

TEST(TokenizerUtf8, SanitizeLikePythonReplace) {
  const std::string r(utf8::kReplacement);
  EXPECT_EQ(utf8::sanitize("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8::sanitize("\xFF" "a"), r + "a");
  EXPECT_EQ(utf8::sanitize("\xE2\x82" "A"), r + "A");
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(utf8::sanitize("a\xF0\x9F\x98"), "a" + r);
}

TEST(TokenizerUtf8, CompletePrefix) {
  EXPECT_EQ(utf8::complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8::complete_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(utf8::complete_prefix("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(utf8::complete_prefix("\xE4\xBD"), 0u);
  EXPECT_EQ(utf8::complete_prefix("a\xFF"), 2u);      // invalid, not incomplete
  EXPECT_EQ(utf8::complete_prefix("\xE2\x82" "A"), 3u);
  EXPECT_EQ(utf8::complete_prefix(""), 0u);
}

// ---- byte alphabet --------------------------------------------------------

TEST(TokenizerByteUnicode, Alphabet) {
  EXPECT_EQ(byte_unicode::byte_to_cp(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(byte_unicode::byte_to_cp('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_unicode::byte_to_cp('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_unicode::byte_to_cp(0xAD), 0x143u);
  int remapped = 0;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_unicode::byte_to_cp(static_cast<uint8_t>(b));
    remapped += cp != static_cast<uint32_t>(b);
    EXPECT_EQ(byte_unicode::cp_to_byte(cp), b);
    all.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(remapped, 68);
  EXPECT_EQ(byte_unicode::decode(byte_unicode::encode(all)), all);
  // Text outside the alphabet decodes to itself.
  EXPECT_EQ(byte_unicode::decode("<think>\xE4\xBD\xA0"), "<think>\xE4\xBD\xA0");
}

// ---- byte-level BPE ------------------------------------------------------

TEST(TokenizerBpe, MergesByRank) {
  TinyBpe v;
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_EQ(t.model_name(), "gpt2");
  EXPECT_EQ(t.pre_name(), "gpt-2");
  EXPECT_EQ(t.encode("hello world", false, false),
            (std::vector<int32_t>{v.id("hello"), v.id("Ġworld")}));
  // "hel" stops at "he"+"l": there is no merge of "he" with "l".
  EXPECT_EQ(t.encode("hel", false, false), (std::vector<int32_t>{v.id("he"), 'l'}));
  EXPECT_EQ(t.decode(t.encode("hello world!", false, false)), "hello world!");
  EXPECT_TRUE(t.encode("", true, true).empty());
}

TEST(TokenizerBpe, SpecialTokens) {
  TinyBpe v;
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  const int32_t end = v.id("<|end|>"), end2 = v.id("<|end|>!"), think = v.id("<think>");
  // Control tokens only with parse_special; the longest match wins.
  EXPECT_EQ(t.encode("hello<|end|>", false, true), (std::vector<int32_t>{v.id("hello"), end}));
  EXPECT_EQ(t.encode("<|end|>!", false, true), (std::vector<int32_t>{end2}));
  const auto plain = t.encode("<|end|>", false, false);
  EXPECT_EQ(plain.size(), 7u);
  EXPECT_EQ(t.decode(plain), "<|end|>");
  // User-defined tokens are ordinary added words: matched either way and
  // always rendered.
  EXPECT_EQ(t.encode("<think>hello", false, false), (std::vector<int32_t>{think, v.id("hello")}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{think, end}), "<think>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{think, end}, true), "<think><|end|>");
  EXPECT_TRUE(t.is_control(end));
  EXPECT_FALSE(t.is_control(think));
  EXPECT_TRUE(t.is_end_of_generation(end));  // the eos id
  EXPECT_EQ(t.eos_id(), end);
  EXPECT_EQ(t.bos_id(), -1);
}

TEST(TokenizerBpe, UnknownPreTokenizerIsNamed) {
  TinyBpe v;
  v.pre = "fancy-new-pre";
  const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*v.gguf()); });
  EXPECT_TRUE(has(msg, "fancy-new-pre")) << msg;
  EXPECT_TRUE(has(msg, "tokenizer.ggml.pre")) << msg;
  EXPECT_TRUE(has(msg, "tiny-bpe.gguf")) << msg;
  EXPECT_TRUE(has(msg, "smollm")) << "lists the supported names: " << msg;
}

TEST(TokenizerBpe, MissingMergesIsAnError) {
  TinyBpe v;
  v.with_merges = false;
  const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*v.gguf()); });
  EXPECT_TRUE(has(msg, "tokenizer.ggml.merges")) << msg;
  EXPECT_TRUE(has(msg, "tiny-bpe.gguf")) << msg;
}

TEST(TokenizerBpe, MalformedMetadataIsAnError) {
  {
    TinyBpe v;
    v.merges.push_back("nospace");
    const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*v.gguf()); });
    EXPECT_TRUE(has(msg, "tokenizer.ggml.merges[9]")) << msg;
  }
  {
    TinyBpe v;
    v.types.pop_back();
    const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*v.gguf()); });
    EXPECT_TRUE(has(msg, "tokenizer.ggml.token_type")) << msg;
  }
  {
    TinyBpe v;
    auto b = v.builder().kv("tokenizer.ggml.bos_token_id", u32(999999));
    const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*test::gguf_from_bytes(b.build())); });
    EXPECT_TRUE(has(msg, "tokenizer.ggml.bos_token_id")) << msg;
    EXPECT_TRUE(has(msg, "999999")) << msg;
  }
  {
    const auto g = test::gguf_from_bytes(
        GgufBuilder().kv("tokenizer.ggml.model", test::m_str("bert")).kv("tokenizer.ggml.tokens", strings({"a"})).build(),
        "bert.gguf");
    const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*g); });
    EXPECT_TRUE(has(msg, "'bert'")) << msg;
  }
  {
    const auto g = test::gguf_from_bytes(GgufBuilder().kv("general.name", test::m_str("x")).build(), "notok.gguf");
    const std::string msg = error_of([&] { (void)Tokenizer::from_gguf(*g); });
    EXPECT_TRUE(has(msg, "tokenizer.ggml.model")) << msg;
    EXPECT_TRUE(has(msg, "notok.gguf")) << msg;
  }
}

TEST(TokenizerBpe, AMergeOfThreePartsIsRefused) {
  TinyBpe v;
  v.merges.push_back("h e l");
  const auto g = v.gguf();
  const std::string msg = error_of([&] { Tokenizer::from_gguf(*g); });
  EXPECT_TRUE(has(msg, "tokenizer.ggml.merges[9] = 'h e l' is not of the form 'A B'")) << msg;
}

TEST(TokenizerBpe, InvalidIds) {
  TinyBpe v;
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  const std::string n = std::to_string(t.n_vocab());
  for (int32_t bad : {-1, t.n_vocab(), 1 << 30}) {
    std::string msg = error_of([&] { (void)t.decode(std::vector<int32_t>{'a', bad}); });
    EXPECT_TRUE(has(msg, std::to_string(bad)) && has(msg, n)) << msg;
    msg = error_of([&] { (void)t.token_text(bad); });
    EXPECT_TRUE(has(msg, std::to_string(bad)) && has(msg, n)) << msg;
    msg = error_of([&] { (void)t.token_bytes(bad, true); });
    EXPECT_TRUE(has(msg, std::to_string(bad))) << msg;
    EXPECT_FALSE(t.is_control(bad));
    EXPECT_FALSE(t.is_end_of_generation(bad));
  }
}

TEST(TokenizerBpe, AddSpecialFollowsFlags) {
  TinyBpe v;
  auto b = v.builder()
               .kv("tokenizer.ggml.bos_token_id", u32(static_cast<uint32_t>(v.id("<think>"))))
               .kv("tokenizer.ggml.add_bos_token", test::m_bool(true))
               .kv("tokenizer.ggml.add_eos_token", test::m_bool(true));
  const auto g = test::gguf_from_bytes(b.build());
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_EQ(t.encode("hello", true, false),
            (std::vector<int32_t>{v.id("<think>"), v.id("hello"), v.id("<|end|>")}));
  EXPECT_EQ(t.encode("hello", false, false), (std::vector<int32_t>{v.id("hello")}));
}

// ---- SentencePiece --------------------------------------------------------

TEST(TokenizerSpm, MergesByScoreWithByteFallback) {
  TinySpm v;
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_EQ(t.model_name(), "llama");
  EXPECT_TRUE(t.strips_leading_space());
  EXPECT_EQ(t.encode("ab", false, false), (std::vector<int32_t>{v.id("\xE2\x96\x81" "ab")}));
  // SentencePiece adds BOS by default.
  EXPECT_EQ(t.encode("ab", true, false), (std::vector<int32_t>{1, v.id("\xE2\x96\x81" "ab")}));
  // 'z' is not a piece: byte fallback.
  EXPECT_EQ(t.encode("az", false, false),
            (std::vector<int32_t>{v.id("\xE2\x96\x81" "a"), v.id("<0x7A>")}));
  EXPECT_EQ(t.decode(t.encode("ab ab z\xC3\xA9\xE4\xBD\xA0", true, false)), "ab ab z\xC3\xA9\xE4\xBD\xA0");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, v.id("\xE2\x96\x81" "ab")}, true), "<s> ab");
  // Ill-formed UTF-8 goes through the byte tokens and comes back unchanged.
  const std::string bad = "a\xFF\xC3" "b\xE2\x82";
  EXPECT_EQ(t.decode(t.encode(bad, false, false)), bad);
  // A space prefix after a special token, as in the reference implementation.
  EXPECT_EQ(t.encode("</s>ab", false, true), (std::vector<int32_t>{2, v.id("\xE2\x96\x81" "ab")}));
}

TEST(TokenizerSpm, PieceWithInnerSpaceMergesAcrossWords) {
  // With a piece like "a▁b" the text cannot be merged word by word.
  TinySpm v;
  for (auto [t, s] : std::vector<std::pair<std::string, float>>{
           {"\xE2\x96\x81" "b", -1.5f}, {"a\xE2\x96\x81" "b", -1.6f}}) {
    v.tokens.push_back(t);
    v.types.push_back(1);
    v.scores.push_back(s);
  }
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_EQ(t.encode("a b", false, false),
            (std::vector<int32_t>{v.id("\xE2\x96\x81"), v.id("a\xE2\x96\x81" "b")}));
  EXPECT_EQ(t.decode(t.encode("a b", false, false)), "a b");
}

TEST(TokenizerSpm, NoSpacePrefix) {
  TinySpm v;
  v.add_space_prefix = false;
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_FALSE(t.strips_leading_space());
  EXPECT_EQ(t.encode("ab", false, false), (std::vector<int32_t>{v.id("ab")}));
  EXPECT_EQ(t.decode(t.encode(" ab", false, false)), " ab");
}

// Without byte tokens a character that is no piece becomes <unk>, as
// SentencePiece does, one per character, counted with the offset of the
// first in the input (never dropped without a word).
TEST(TokenizerSpm, CharactersWithoutAPieceOrByteTokensAreCountedAsUnknown) {
  TinySpm v;
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.types[id] == 6) v.types[id] = 1;  // the <0xNN> tokens become plain text: no byte fallback
  const auto g = v.gguf();
  const Tokenizer t = Tokenizer::from_gguf(*g);
  EXPECT_EQ(t.unk_id(), 0);
  Tokenizer::EncodeStats stats;
  EXPECT_EQ(t.encode("az", false, false, &stats), (std::vector<int32_t>{v.id("\xE2\x96\x81" "a"), 0}));
  EXPECT_EQ(stats.unknown, 1u);
  EXPECT_EQ(stats.first_unknown, 1u);
  EXPECT_EQ(stats.replaced, 0u);
  // Offsets in the input, though a space is three bytes once escaped; one
  // <unk> per character, multi-byte ones included.
  stats = {};
  EXPECT_EQ(t.encode("ab  \xE4\xBD\xA0z", false, false, &stats),
            (std::vector<int32_t>{v.id("\xE2\x96\x81" "ab"), v.id("\xE2\x96\x81"), v.id("\xE2\x96\x81"), 0, 0}));
  EXPECT_EQ(stats.unknown, 2u);
  EXPECT_EQ(stats.first_unknown, 4u);
  // After a special token, the offset still counts from the start of the input.
  stats = {};
  (void)t.encode("</s>ab z", false, true, &stats);
  EXPECT_EQ(stats.unknown, 1u);
  EXPECT_EQ(stats.first_unknown, 7u);
  // <unk> shows where the text was when special tokens are rendered.
  EXPECT_EQ(t.decode(t.encode("a\xE4\xBD\xA0" "b", false, false), true), "a<unk>b");
  // With byte tokens nothing is unknown.
  TinySpm with_bytes;
  const auto gb = with_bytes.gguf();
  stats = {};
  (void)Tokenizer::from_gguf(*gb).encode("az\xE4\xBD\xA0", false, false, &stats);
  EXPECT_EQ(stats.unknown, 0u);
}

// ---- robustness on real vocabularies ---------------------------------------

TEST(TokenizerRobustness, IllFormedUtf8RoundTrips) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-gpt-2.gguf");  // has a token for every byte
  const Tokenizer t = Tokenizer::from_gguf(*g);
  for (const std::string& s :
       {std::string("\xFF\xFE"), std::string("abc \xC3 def"), std::string("\xE2\x82\xAC\xE2\x82"),
        std::string("x\xF0\x9F\x98 y  \xED\xA0\x80 12\xC2"), std::string("\0a\0", 3),
        std::string("<|endoftext|\xFF>")}) {
    for (bool ps : {false, true}) EXPECT_EQ(t.decode(t.encode(s, false, ps), true), s);
  }
}

TEST(TokenizerRobustness, BytesWithoutTokenBecomeTheReplacementCharacter) {
  TALLY_NEED_SHARED();
  // StarCoder's vocabulary has no token for 0xC0, 0xC1, 0xF1 or 0xF5..0xFF:
  // each character or ill-formed sequence holding one becomes U+FFFD, counted.
  const auto g = test::load_vocab("ggml-vocab-starcoder.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  const std::string r(utf8::kReplacement);
  Tokenizer::EncodeStats stats;
  EXPECT_EQ(t.decode(t.encode("a\xFF" "b \xC0x", false, false, &stats)), "a" + r + "b " + r + "x");
  EXPECT_EQ(stats.replaced, 2u);
  EXPECT_EQ(stats.first_replaced, 1u);
  // A prompt of only such bytes is not empty.
  stats = {};
  EXPECT_EQ(t.decode(t.encode("\xFE\xFF", false, true, &stats)), r + r);
  EXPECT_EQ(stats.replaced, 2u);
  // A well-formed character with such a lead byte (U+40000 starts with 0xF1) is one U+FFFD.
  stats = {};
  EXPECT_EQ(t.decode(t.encode("x\xF1\x80\x80\x80y", false, false, &stats)), "x" + r + "y");
  EXPECT_EQ(stats.replaced, 1u);
  // Offsets count from the start of the input, across special tokens.
  stats = {};
  (void)t.encode("<|endoftext|>ab\xFF", false, true, &stats);
  EXPECT_EQ(stats.first_replaced, 15u);
  // Bytes the vocabulary can spell go through unchanged, even when ill-formed.
  stats = {};
  EXPECT_EQ(t.decode(t.encode("a\x80\xE4\xBD", false, false, &stats)), "a\x80\xE4\xBD");
  EXPECT_EQ(stats.replaced, 0u);
}

TEST(TokenizerRobustness, LongRuns) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-starcoder.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  for (const std::string& s : {std::string(1 << 20, ' '), std::string(1 << 18, 'a'),
                              std::string(1 << 18, '1'), std::string(100000, '\n') + "x",
                              std::string(1 << 16, '!')}) {
    const auto ids = t.encode(s, false, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(t.decode(ids), s);
  }
  const auto gs = test::load_vocab("ggml-vocab-llama-spm.gguf");
  const Tokenizer spm = Tokenizer::from_gguf(*gs);
  const std::string s(1 << 17, 'a');
  EXPECT_EQ(spm.decode(spm.encode(s, false, false)), s);
}

// ---- streaming decoder -----------------------------------------------------

// The ids of the single-byte tokens of `s` in a byte-level vocabulary, so that
// every multi-byte character is split across tokens.
std::vector<int32_t> byte_ids(const Tokenizer& t, std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) {
    const auto one = t.encode(std::string(1, c), false, false);
    if (one.size() == 1) {
      ids.push_back(one[0]);
      continue;
    }
    // A lone lead or continuation byte is ill-formed on its own; find the
    // token of its alphabet character directly.
    const std::string ch(byte_unicode::byte_to_utf8(static_cast<uint8_t>(c)));
    for (int32_t id = 0; id < t.n_vocab(); ++id)
      if (t.token_text(id) == ch) {
        ids.push_back(id);
        break;
      }
  }
  return ids;
}

TEST(TokenizerStream, HoldsSplitCharacters) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-starcoder.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  const std::string text = "a\xF0\x9F\x98\x80 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";
  const auto ids = byte_ids(t, text);
  ASSERT_EQ(ids.size(), text.size());
  StreamDecoder sd(t);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(sd.push(id));
  EXPECT_EQ(outs[0], "a");
  EXPECT_EQ(outs[1], "");
  EXPECT_EQ(outs[2], "");
  EXPECT_EQ(outs[3], "");
  EXPECT_EQ(outs[4], "\xF0\x9F\x98\x80");  // the emoji once its 4th byte arrives
  EXPECT_EQ(outs[7], "");
  EXPECT_EQ(outs[8], "\xE4\xBD\xA0");
  std::string all;
  for (const auto& o : outs) {
    EXPECT_TRUE(utf8::is_valid(o));
    all += o;
  }
  EXPECT_EQ(sd.flush(), "");
  EXPECT_EQ(all, text);
}

TEST(TokenizerStream, FlushReplacesIncompleteAndInvalidBytes) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-gpt-2.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  const std::string r(utf8::kReplacement);
  StreamDecoder sd(t);
  const auto ids = byte_ids(t, "\xF0\x9F\x98");  // 3 of 4 bytes
  for (int32_t id : ids) EXPECT_EQ(sd.push(id), "");
  EXPECT_EQ(sd.flush(), r);
  EXPECT_EQ(sd.flush(), "");
  // A byte that can never start a character is replaced at once.
  const auto ff = byte_ids(t, "\xFF" "b");
  EXPECT_EQ(sd.push(ff[0]), r);
  EXPECT_EQ(sd.push(ff[1]), "b");
  // An interrupted sequence: the lead becomes U+FFFD, the next char survives.
  const auto cut = byte_ids(t, "\xE4\xBD" "c");
  EXPECT_EQ(sd.push(cut[0]), "");
  EXPECT_EQ(sd.push(cut[1]), "");
  EXPECT_EQ(sd.push(cut[2]), r + "c");
}

TEST(TokenizerStream, InvalidIdLeavesStateUnchanged) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-starcoder.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  StreamDecoder sd(t);
  const auto ids = byte_ids(t, "\xE4\xBD\xA0");
  EXPECT_EQ(sd.push(ids[0]), "");
  const std::string msg = error_of([&] { (void)sd.push(49152); });
  EXPECT_TRUE(has(msg, "49152")) << msg;
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "\xE4\xBD\xA0");
}

TEST(TokenizerStream, SpecialTokensAndSpacePrefix) {
  TALLY_NEED_SHARED();
  const auto g = test::load_vocab("ggml-vocab-llama-spm.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*g);
  {
    StreamDecoder sd(t);
    EXPECT_EQ(sd.push(1), "");  // <s> is not rendered
    EXPECT_EQ(sd.push(15043), "Hello");  // "▁Hello": the prefix space is dropped
    EXPECT_EQ(sd.push(3186), " world");
    EXPECT_EQ(sd.push(2), "");
    EXPECT_EQ(sd.flush(), "");
    EXPECT_EQ(sd.push(15043), "Hello");  // flush starts a new sequence
  }
  {
    StreamDecoder sd(t, true);
    EXPECT_EQ(sd.push(1), "<s>");
    EXPECT_EQ(sd.push(15043), " Hello");
  }
  // Byte-fallback tokens of an emoji: 243 162 157 131 = <0xF0><0x9F><0x9A><0x80>.
  StreamDecoder sd(t);
  EXPECT_EQ(sd.push(29871), "");  // "▁" alone: its space is the stripped prefix
  EXPECT_EQ(sd.push(243), "");
  EXPECT_EQ(sd.push(162), "");
  EXPECT_EQ(sd.push(157), "");
  EXPECT_EQ(sd.push(131), "\xF0\x9F\x9A\x80");
  const std::vector<int32_t> seq = {29871, 243, 162, 157, 131};
  EXPECT_EQ(t.decode(seq), "\xF0\x9F\x9A\x80");
}

}  // namespace
}  // namespace tally
