#pragma once
// Byte-level BPE (GPT-2 style) over one pre-token. Symbols start as one token
// per byte (the byte's GPT-2 alphabet character) and the adjacent pair with
// the lowest merge rank is merged until no ranked pair is left; ties go to the
// leftmost pair. Bytes the vocabulary has no token for are dropped here; the
// Tokenizer replaces their characters by U+FFFD before they get here.
// Immutable after construction; thread-safe.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pair_map.h"
#include "tokenizer/vocab.h"

namespace tally {

class BpeModel {
 public:
  // `merges` are "A B" strings, rank = index. Throws tally::Error when a
  // merge has no separating space. Merges whose parts or result are not
  // tokens can never apply and are skipped.
  BpeModel(const Vocab& vocab, const std::vector<std::string>& merges);

  // Appends the tokens of one pre-token given as raw bytes.
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  size_t n_merges() const { return merges_.size(); }
  // Whether the vocabulary has a token for this byte (its GPT-2 alphabet character).
  bool has_byte(uint8_t b) const { return byte_token_[b] >= 0; }

 private:
  // The BPE itself, without the cache.
  void merge_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_token_{};  // token of each byte's character, -1 if absent
  PairMap merges_;                         // (left, right) -> rank and merged token
  uint64_t instance_;                      // tells the per-thread caches of instances apart
  std::string source_;
};

}  // namespace tally
