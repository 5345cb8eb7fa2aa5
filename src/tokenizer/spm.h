#pragma once
// SentencePiece-style BPE by scores: symbols start as the UTF-8 characters of
// the (already whitespace-escaped) text; the adjacent pair whose concatenation
// is a vocabulary piece with the highest score is merged (ties: leftmost) until
// none is left. Characters that are not pieces fall back to <0xXX> byte
// tokens, or, without them, to the unknown token as SentencePiece does
// (counted, so that callers can say so). Immutable; encode is thread-safe.
// When no piece has a U+2581 right after another character (true of the
// Llama vocabulary), no symbol can span such a boundary, so the text is
// merged word by word there: the same result, without one huge heap.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace tally {

class SpmModel {
 public:
  // `vocab` must outlive this object.
  explicit SpmModel(const Vocab& vocab);

  // Characters spelled as the unknown token.
  struct Unknowns {
    size_t count = 0;
    size_t first = 0;  // byte offset of the first in the text encoded
  };

  // Appends the tokens of `text` (spaces already replaced by U+2581).
  void encode(std::string_view text, std::vector<int32_t>& out, Unknowns& unknowns) const;

 private:
  // A piece the text may be segmented into: normal and user-defined tokens,
  // never control, unknown, unused or byte tokens.
  int32_t find_piece(std::string_view s) const;
  // `at`: the symbol's offset in the text encode() was given.
  void emit_symbol(std::string_view s, size_t at, std::vector<int32_t>& out, Unknowns& unknowns) const;
  void encode_word(std::string_view text, size_t at, std::vector<int32_t>& out, Unknowns& unknowns) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_token_{};  // <0xXX> tokens, -1 when absent
  bool split_words_ = false;               // see the class comment
};

}  // namespace tally
