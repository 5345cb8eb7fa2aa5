// The external tokenizer conformance suite (vocabulary-only GGUFs with texts
// and the ids the Hugging Face reference tokenizers produce for them).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"
#include "tokenizer_test_util.h"

namespace tally {
namespace {

const std::string kDir = TALLY_SHARED_DIR "/testdata/tokenizer/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: each text is followed by "\n__ggml_vocab_test__\n" (so the newline
// before the separator belongs to the separator, not to the text).
std::vector<std::string> read_texts(const std::string& path) {
  const std::string all = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = all.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    texts.push_back(all.substr(pos, next - pos));
  return texts;
}

// .out: one line of space-separated ids per text.
std::vector<std::vector<int32_t>> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : utf8::sanitize(s)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out.push_back(c);
  }
  return out;
}

void run_suite(const std::string& name, const std::string& expect_model) {
  TALLY_NEED_SHARED();
  const std::string base = kDir + "ggml-vocab-" + name + ".gguf";
  const auto f = test::load_vocab("ggml-vocab-" + name + ".gguf");
  const Tokenizer tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok.model_name(), expect_model);
  const auto texts = read_texts(base + ".inp");
  const auto expected = read_ids(base + ".out");
  ASSERT_EQ(texts.size(), expected.size()) << base;
  ASSERT_GT(texts.size(), 40u);
  size_t passed = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(texts[i], false, false);
    if (got == expected[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << name << " text #" << i << " \"" << printable(texts[i]) << "\"\n  expected:"
                    << ids_string(expected[i]) << "\n  got:     " << ids_string(got);
    }
    // Every text of the suite survives a round trip in these vocabularies
    // (byte-level BPE covers all bytes; SentencePiece has byte fallback).
    EXPECT_EQ(tok.decode(got), texts[i]) << name << " round trip of text #" << i;
  }
  EXPECT_EQ(passed, texts.size()) << name;
}

TEST(TokenizerConformance, Gpt2) { run_suite("gpt-2", "gpt2"); }
TEST(TokenizerConformance, Starcoder) { run_suite("starcoder", "gpt2"); }
TEST(TokenizerConformance, LlamaSpm) { run_suite("llama-spm", "llama"); }

// The suite's files end right after their metadata (no tensors, no padding
// up to the empty data section): the reader must accept them as they are.
TEST(TokenizerConformance, OpensVocabFilesFromDisk) {
  TALLY_NEED_SHARED();
  for (const char* name : {"gpt-2", "starcoder", "llama-spm"}) {
    const GgufFile f(kDir + "ggml-vocab-" + name + ".gguf");
    EXPECT_NO_THROW((void)Tokenizer::from_gguf(f)) << name;
  }
}

TEST(TokenizerConformance, SuiteFilesParse) {
  TALLY_NEED_SHARED();
  const auto texts = read_texts(kDir + "ggml-vocab-gpt-2.gguf.inp");
  ASSERT_GE(texts.size(), 5u);
  EXPECT_EQ(texts[0], "ied 4 \xC2\xBD months");
  EXPECT_EQ(texts[2], "");
  EXPECT_EQ(texts[3], " ");
  EXPECT_EQ(texts[7], "\n");  // a text that is a single newline
}

TEST(TokenizerConformance, VocabMetadata) {
  TALLY_NEED_SHARED();
  const Tokenizer spm = Tokenizer::from_gguf(*test::load_vocab("ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(spm.n_vocab(), 32000);
  EXPECT_EQ(spm.bos_id(), 1);
  EXPECT_EQ(spm.eos_id(), 2);
  EXPECT_TRUE(spm.is_end_of_generation(2));
  EXPECT_FALSE(spm.is_end_of_generation(1));
  EXPECT_TRUE(spm.is_control(1));
  // add_bos_token is true in this file.
  const auto ids = spm.encode("Hello world", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(spm.decode(ids), "Hello world");
  EXPECT_EQ(spm.decode(ids, true), "<s> Hello world");
  // "<s>" is parsed as BOS only with parse_special.
  EXPECT_EQ(spm.encode("<s>Hello", false, true), (std::vector<int32_t>{1, 15043}));
  EXPECT_NE(spm.encode("<s>Hello", false, false)[0], 1);

  const Tokenizer sc = Tokenizer::from_gguf(*test::load_vocab("ggml-vocab-starcoder.gguf"));
  EXPECT_EQ(sc.model_name(), "gpt2");
  EXPECT_EQ(sc.pre_name(), "starcoder");
  EXPECT_EQ(sc.n_vocab(), 49152);
  EXPECT_TRUE(sc.is_end_of_generation(0));  // <|endoftext|>
  // No add_bos_token key: a byte-level BPE vocabulary adds nothing.
  EXPECT_EQ(sc.encode("Hi", true, false), sc.encode("Hi", false, false));
  EXPECT_EQ(sc.token_text(0), "<|endoftext|>");
  EXPECT_EQ(sc.token_bytes(0, false), "");
  EXPECT_EQ(sc.token_bytes(0, true), "<|endoftext|>");
}

}  // namespace
}  // namespace tally
