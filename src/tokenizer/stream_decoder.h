#pragma once
// Incremental detokenization for streaming output: push() takes one id at a
// time and returns only complete, valid UTF-8. A multi-byte character split
// across tokens is held back until its last byte arrives; bytes that can
// never form a character are replaced by U+FFFD at once. The concatenation of
// all push() results and flush() equals utf8::sanitize(decode(ids)).
// Not thread-safe (it has state); the tokenizer it refers to is shared.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tally {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false);

  // Throws tally::Error (naming the id and vocabulary size) on an invalid id;
  // the decoder's state is then unchanged.
  std::string push(int32_t id);
  // Returns what is held back (an incomplete character becomes U+FFFD) and
  // resets the decoder for a new sequence.
  std::string flush();

 private:
  Tokenizer tok_;  // shares the tables, so the decoder cannot dangle
  bool render_special_;
  bool strip_pending_;  // SentencePiece: drop one space from the first non-empty piece
  std::string pending_;  // an incomplete UTF-8 sequence (at most 3 bytes)
};

}  // namespace tally
