#pragma once
// SentencePiece-style BPE by scores: symbols start as the UTF-8 characters of
// the (already whitespace-escaped) text; the adjacent pair whose concatenation
// is a vocabulary piece with the highest score is merged (ties: leftmost) until
// none is left. Characters that are not pieces fall back to <0xXX> byte
// tokens, or to the unknown token. Immutable; encode is thread-safe.
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

  // Appends the tokens of `text` (spaces already replaced by U+2581).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  // A piece the text may be segmented into: normal and user-defined tokens,
  // never control, unknown, unused or byte tokens.
  int32_t find_piece(std::string_view s) const;
  void emit_symbol(std::string_view s, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_token_{};  // <0xXX> tokens, -1 when absent
};

}  // namespace tally
