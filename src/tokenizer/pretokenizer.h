#pragma once
// Splits text into pre-tokens (the units byte-level BPE works on) with the
// regex sequence of a `tokenizer.ggml.pre` name. Each regex of the sequence
// re-splits every piece produced so far; matches and the gaps between them
// both become pieces, so the pieces always concatenate back to the input.
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace tally {

class Pretokenizer {
 public:
  // Throws tally::Error naming `pre` (and the known names) when unknown.
  explicit Pretokenizer(const std::string& pre);

  // Appends the pieces of `text` (views into it) to `out`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // Whether a piece that is itself a token is emitted whole, without merges
  // (Llama 3's "ignore_merges").
  bool ignore_merges() const { return ignore_merges_; }

  static std::vector<std::string> known_names();

 private:
  std::vector<Regex> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace tally
