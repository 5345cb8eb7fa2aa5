#include "tokenizer/vocab.h"

#include <cfloat>
#include <cmath>

#include "core/error.h"
#include "io/gguf.h"

namespace tally {
namespace {

int32_t read_id(const GgufFile& f, std::string_view key, int32_t n_vocab) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return -1;
  const int64_t id = v->as_i64(key);
  // Some converters write -1 (or UINT32_MAX) for "none".
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || id >= n_vocab)
    fail("{}: {} = {} is outside the vocabulary (size {})", f.path(), key, id, n_vocab);
  return static_cast<int32_t>(id);
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  v.source = f.path();
  if (!f.has("tokenizer.ggml.model"))
    fail("{}: no tokenizer in this file (missing tokenizer.ggml.model)", f.path());
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string("tokenizer.ggml.pre", "default");

  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  if (toks.empty()) fail("{}: tokenizer.ggml.tokens is empty", f.path());
  if (toks.size() > static_cast<size_t>(INT32_MAX))
    fail("{}: tokenizer.ggml.tokens has {} entries (too many)", f.path(), toks.size());
  const auto n = static_cast<int32_t>(toks.size());
  v.tokens.reserve(toks.size());
  v.index.reserve(toks.size());
  for (int32_t i = 0; i < n; ++i) {
    v.tokens.push_back(toks[static_cast<size_t>(i)].as_string("tokenizer.ggml.tokens"));
    v.index.emplace(v.tokens.back(), i);
  }

  v.types.assign(toks.size(), TokenType::Normal);
  if (f.has("tokenizer.ggml.token_type")) {
    const auto& tt = f.get_array("tokenizer.ggml.token_type");
    if (tt.size() != toks.size())
      fail("{}: tokenizer.ggml.token_type has {} entries but there are {} tokens", f.path(),
           tt.size(), toks.size());
    for (size_t i = 0; i < tt.size(); ++i) {
      const int64_t t = tt[i].as_i64("tokenizer.ggml.token_type");
      if (t < 0 || t > 6)
        fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", f.path(), i, t);
      v.types[i] = static_cast<TokenType>(t);
    }
  }

  v.scores.assign(toks.size(), 0.0f);
  if (f.has("tokenizer.ggml.scores")) {
    const auto& sc = f.get_array("tokenizer.ggml.scores");
    if (sc.size() != toks.size())
      fail("{}: tokenizer.ggml.scores has {} entries but there are {} tokens", f.path(),
           sc.size(), toks.size());
    for (size_t i = 0; i < sc.size(); ++i) {
      const double x = sc[i].as_f64("tokenizer.ggml.scores");
      if (!(std::fabs(x) <= FLT_MAX))  // also NaN: the float cast of anything else is undefined
        fail("{}: tokenizer.ggml.scores[{}] = {} is not a finite float", f.path(), i, x);
      v.scores[i] = static_cast<float>(x);
    }
  }

  v.bos = read_id(f, "tokenizer.ggml.bos_token_id", n);
  v.eos = read_id(f, "tokenizer.ggml.eos_token_id", n);
  v.eot = read_id(f, "tokenizer.ggml.eot_token_id", n);
  v.unk = read_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.pad = read_id(f, "tokenizer.ggml.padding_token_id", n);

  // SentencePiece models add BOS unless told otherwise; byte-level BPE models do not.
  const bool spm = v.model == "llama";
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  if (v.add_bos && v.bos < 0)
    fail("{}: tokenizer.ggml.add_bos_token is set but there is no tokenizer.ggml.bos_token_id",
         f.path());
  if (v.add_eos && v.eos < 0)
    fail("{}: tokenizer.ggml.add_eos_token is set but there is no tokenizer.ggml.eos_token_id",
         f.path());
  return v;
}

void Vocab::check_id(int32_t id) const {
  if (!valid(id)) fail("token id {} is out of range (vocabulary size {})", id, size());
}

}  // namespace tally
