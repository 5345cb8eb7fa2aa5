#pragma once
// Finds special-token texts inside a text so that they become single tokens
// instead of being tokenized as ordinary text. At each position the longest
// special text that starts there wins; scanning is left to right.
// Immutable after construction.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace tally {

// A piece of the input: plain text (token == -1) or one special token.
struct TextFragment {
  std::string_view text;
  int32_t token = -1;
};

class SpecialTokenSplitter {
 public:
  // Control and user-defined tokens of `vocab` take part (empty texts never do).
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Splits `text`. Control tokens are matched only when `parse_control`;
  // user-defined tokens always (they are ordinary added words, not markup).
  void split(std::string_view text, bool parse_control, std::vector<TextFragment>& out) const;

  // Splits a chat prompt whose bytes i with from_content[i] != 0 came from the
  // conversation. Outside them, control tokens match as with parse_control.
  // A control token, or a user-defined one that occurs in `markup`, lying
  // wholly inside them becomes a plain-text fragment of its own; one that
  // straddles the border does not match.
  void split_prompt(std::string_view text, const std::vector<uint8_t>& from_content, std::string_view markup,
                    std::vector<TextFragment>& out) const;

 private:
  struct Candidate {
    std::string text;
    int32_t id;
    bool control;
  };
  std::array<std::vector<Candidate>, 256> by_first_byte_;  // each sorted longest first
};

}  // namespace tally
