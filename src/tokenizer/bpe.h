#pragma once
// Byte-level BPE (GPT-2 style) over one pre-token. Symbols start as one token
// per byte (the byte's GPT-2 alphabet character) and the adjacent pair with
// the lowest merge rank is merged until no ranked pair is left; ties go to the
// leftmost pair. Bytes the vocabulary has no token for are dropped, like the
// reference tokenizer does. Immutable after construction; thread-safe.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find(int32_t a, int32_t b) const {
    auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::array<int32_t, 256> byte_token_{};  // token of each byte's character, -1 if absent
  std::unordered_map<uint64_t, Merge> merges_;
  std::string source_;
};

}  // namespace tally
