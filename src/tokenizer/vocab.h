#pragma once
// The token table of a GGUF vocabulary: strings, types, scores, the special
// ids and flags. Invariant: every stored id (bos, eos, ...) is either -1 or a
// valid index into `tokens`; `types` and `scores` have one entry per token.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tally {

class GgufFile;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// Hash for heterogeneous string_view lookups in unordered maps.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
  std::string source;  // file the vocabulary came from, for error messages
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre ("default" when absent)
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<float> scores;  // all 0 when the file has none
  TokenMap index;             // token string -> id (first occurrence wins)

  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;  // SentencePiece only

  static Vocab from_gguf(const GgufFile& f);

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  int32_t find(std::string_view text) const {
    auto it = index.find(text);
    return it == index.end() ? -1 : it->second;
  }
  TokenType type(int32_t id) const { return types[static_cast<size_t>(id)]; }
  // Throws tally::Error naming the id and the vocabulary size.
  void check_id(int32_t id) const;
};

}  // namespace tally
