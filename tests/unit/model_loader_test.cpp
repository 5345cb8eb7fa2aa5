// The loader's refusals on broken tiny models (tiny_model.h): every message
// names the tensor or metadata key and what was expected vs found. Model-free,
// so these also run under the sanitizers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/session.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::TinySpec;

// The message of the tally::Error that loading `s` throws ("" and a failure if it loads).
std::string load_error(const TinySpec& s) {
  try {
    test::make_tiny_model(s);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the broken model loaded";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(LoaderErrors, TinySpecLoads) {
  const auto tm = test::make_tiny_model();
  const auto& c = tm->model->config();
  EXPECT_EQ(c.arch->name, "llama");
  EXPECT_EQ(c.n_vocab, 50);
  EXPECT_EQ(c.n_ctx_train, 128);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.rope_dims, 16);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
}

TEST(LoaderErrors, MissingTensor) {
  TinySpec s;
  s.drop_tensors = {"blk.1.ffn_up.weight"};
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "missing tensor 'blk.1.ffn_up.weight'");
  EXPECT_HAS(msg, "tiny");
}

TEST(LoaderErrors, MissingNormVector) {
  TinySpec s;
  s.drop_tensors = {"output_norm.weight"};
  EXPECT_HAS(load_error(s), "missing tensor 'output_norm.weight'");
}

TEST(LoaderErrors, WrongMatrixShape) {
  TinySpec s;
  s.dims_of["blk.0.attn_q.weight"] = {64, 48};  // 48 rows instead of n_head * head_dim = 64
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "blk.0.attn_q.weight");
  EXPECT_HAS(msg, "{64, 48}");
  EXPECT_HAS(msg, "expected {64, 64}");
}

TEST(LoaderErrors, TransposedMatrix) {
  TinySpec s;
  s.dims_of["blk.1.ffn_down.weight"] = {64, 96};  // stored as ffn_up's shape: {n_ff, n_embd} expected
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "blk.1.ffn_down.weight");
  EXPECT_HAS(msg, "{64, 96}");
  EXPECT_HAS(msg, "expected {96, 64}");
}

TEST(LoaderErrors, WrongNormLength) {
  TinySpec s;
  s.dims_of["blk.0.ffn_norm.weight"] = {32};
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "blk.0.ffn_norm.weight");
  EXPECT_HAS(msg, "{32}");
  EXPECT_HAS(msg, "expected {64}");
}

TEST(LoaderErrors, UnsupportedArchitecture) {
  TinySpec s;
  s.arch = "gpt9";
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "'gpt9'");
  EXPECT_HAS(msg, "not supported");
  EXPECT_HAS(msg, "supported: llama");
}

TEST(LoaderErrors, HeadsNotDivisibleIntoKvHeads) {
  TinySpec s;
  s.n_kv_head = 3;
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "4 query heads");
  EXPECT_HAS(msg, "3 kv heads");
}

TEST(LoaderErrors, MissingRequiredKey) {
  TinySpec s;
  s.drop_keys = {"llama.block_count"};
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "'llama.block_count'");
  EXPECT_HAS(msg, "missing");
}

TEST(LoaderErrors, MissingArchitectureKey) {
  TinySpec s;
  s.drop_keys = {"general.architecture"};
  EXPECT_HAS(load_error(s), "'general.architecture'");
}

TEST(LoaderErrors, ZeroHeadCount) {
  TinySpec s;
  s.meta_of["llama.attention.head_count"] = test::m_u32(0);  // tensors keep their valid shapes
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "llama.attention.head_count");
  EXPECT_HAS(msg, "out of range");
}

TEST(LoaderErrors, WrongKeyType) {
  TinySpec s;
  s.meta_of["llama.block_count"] = test::m_str("two");
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "'llama.block_count'");
}

TEST(LoaderErrors, VocabularySizeFromEmbeddingWhenKeyAbsent) {
  TinySpec s;
  s.drop_keys = {"llama.vocab_size"};
  EXPECT_EQ(test::make_tiny_model(s)->model->config().n_vocab, 50);
}

TEST(LoaderErrors, AbsentKvHeadCountMeansOneKvHeadPerQueryHead) {
  // Without the key the file is read as multi-head: the GQA-sized K matrix no longer fits.
  TinySpec s;
  s.drop_keys = {"llama.attention.head_count_kv"};
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "blk.0.attn_k.weight");
  EXPECT_HAS(msg, "{64, 32}");
  EXPECT_HAS(msg, "expected {64, 64}");
}

TEST(LoaderErrors, UnsupportedMatrixType) {
  // Q2_K blocks hold 256 values: rows must be a multiple of 256 for the file to be valid at all.
  TinySpec s;
  s.n_embd = 256;
  s.head_dim = 64;
  s.n_ff = 256;
  s.type_of["blk.0.attn_k.weight"] = 10;  // Q2_K, zero bytes of the right size
  const auto msg = load_error(s);
  EXPECT_HAS(msg, "blk.0.attn_k.weight");
  EXPECT_HAS(msg, "Q2_K");
  EXPECT_HAS(msg, "id 10");
}

TEST(LoaderErrors, TiedOutputWhenOutputTensorAbsent) {
  TinySpec s;
  s.tied = true;
  const auto tied = test::make_tiny_model(s);
  EXPECT_TRUE(tied->model->tied_output());
  EXPECT_EQ(tied->model->output().data, tied->model->token_embd().data);

  const auto untied = test::make_tiny_model();
  EXPECT_FALSE(untied->model->tied_output());
  EXPECT_NE(untied->model->output().data, untied->model->token_embd().data);
  EXPECT_EQ(untied->model->output().data, untied->model->file().find_tensor("output.weight")->data);
}

TEST(LoaderErrors, TokenOutsideVocabularyIsRefusedBeforeWriting) {
  const auto tm = test::make_tiny_model();
  SessionOptions o;
  o.n_ctx = 64;
  o.n_threads = 1;
  o.kv_budget = 64ull << 20;
  for (int64_t n_batch : {512, 2}) {
    SCOPED_TRACE("n_batch " + std::to_string(n_batch));
    o.n_batch = n_batch;
    Session s(*tm->model, o);
    s.append(std::vector<int32_t>{1, 2, 3});
    for (int32_t bad : {50, -1, 1 << 30}) {
      try {
        s.append(std::vector<int32_t>{4, 5, 6, bad});  // the bad id comes last: a later chunk with n_batch 2
        ADD_FAILURE() << "token " << bad << " was accepted";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_HAS(msg, "token id " + std::to_string(bad));
        EXPECT_HAS(msg, "[0, 50)");
      }
      EXPECT_EQ(s.length(), 3);
      // The cache kept nothing of the refused chunks: the next append starts at
      // position 3 (a longer cache would refuse it) and sees only 1, 2, 3.
      const auto got = s.append(std::vector<int32_t>{4});
      const std::vector<float> after(got.begin(), got.end());
      s.truncate(3);
      Session fresh(*tm->model, o);
      const auto want = fresh.append(std::vector<int32_t>{1, 2, 3, 4});
      EXPECT_EQ(after, std::vector<float>(want.begin(), want.end()));
    }
  }
}

}  // namespace
}  // namespace tally
