#include "tokenizer/spm.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/utf8.h"

namespace tally {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// Whether U+2581 starts at byte `p` of `s` right after another U+2581.
bool after_space(std::string_view s, size_t p) {
  return p >= kSpace.size() && s.substr(p - kSpace.size(), kSpace.size()) == kSpace;
}

// Whether `s` has a U+2581 that directly follows some other character.
bool has_inner_space(std::string_view s) {
  for (size_t p = s.find(kSpace, 1); p != std::string_view::npos; p = s.find(kSpace, p + 1))
    if (!after_space(s, p)) return true;
  return false;
}

}  // namespace

SpmModel::SpmModel(const Vocab& vocab) : vocab_(vocab) {
  for (int b = 0; b < 256; ++b) {
    const int32_t id = vocab.find(fmt::format("<0x{:02X}>", b));
    byte_token_[static_cast<size_t>(b)] =
        id >= 0 && vocab.type(id) == TokenType::Byte ? id : -1;
  }
  split_words_ = true;
  for (int32_t id = 0; id < vocab.size() && split_words_; ++id)
    if (find_piece(vocab.tokens[static_cast<size_t>(id)]) == id &&
        has_inner_space(vocab.tokens[static_cast<size_t>(id)]))
      split_words_ = false;
}

int32_t SpmModel::find_piece(std::string_view s) const {
  const int32_t id = vocab_.find(s);
  if (id < 0) return -1;
  switch (vocab_.type(id)) {
    case TokenType::Normal:
    case TokenType::UserDefined:
    case TokenType::Undefined:
      return id;
    default:
      return -1;
  }
}

void SpmModel::emit_symbol(std::string_view s, size_t at, std::vector<int32_t>& out, Unknowns& unknowns) const {
  const int32_t id = find_piece(s);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  for (char c : s) {
    const int32_t b = byte_token_[static_cast<uint8_t>(c)];
    if (b >= 0) {
      out.push_back(b);
    } else if (vocab_.unk >= 0) {
      // Without byte tokens the whole character becomes one unknown token.
      out.push_back(vocab_.unk);
      if (unknowns.count++ == 0) unknowns.first = at;
      return;
    } else {
      fail("{}: '{}' is not in the vocabulary, which has no byte tokens and no unknown token",
           vocab_.source, utf8::sanitize(s));
    }
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out, Unknowns& unknowns) const {
  if (!split_words_) {
    encode_word(text, 0, out, unknowns);
    return;
  }
  // Cut before every U+2581 that follows another character.
  size_t start = 0;
  for (size_t p = text.find(kSpace, 1); p != std::string_view::npos; p = text.find(kSpace, p + 1)) {
    if (after_space(text, p)) continue;
    encode_word(text.substr(start, p - start), start, out, unknowns);
    start = p;
  }
  encode_word(text.substr(start), start, out, unknowns);
}

void SpmModel::encode_word(std::string_view text, size_t at, std::vector<int32_t>& out, Unknowns& unknowns) const {
  if (text.empty()) return;
  // Symbols are byte ranges of `text` in a doubly linked list; a merged
  // symbol keeps the start of its left part. Scratch space is per thread.
  struct Scratch {
    std::vector<int32_t> start, len, prev, next;
  };
  thread_local Scratch s;
  s.start.clear();
  s.len.clear();
  for (size_t i = 0; i < text.size();) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    // An ill-formed or truncated sequence is split into single bytes, which
    // then take the byte fallback.
    const size_t n = d.status == utf8::Status::Ok ? d.len : 1;
    s.start.push_back(static_cast<int32_t>(i));
    s.len.push_back(static_cast<int32_t>(n));
    i += n;
  }
  const size_t n = s.start.size();
  s.prev.resize(n);
  s.next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.prev[i] = static_cast<int32_t>(i) - 1;
    s.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }

  struct Cand {
    float score;
    int32_t sym, left_len, right_len;
  };
  // Max-heap on score, then the leftmost pair.
  const auto worse = [](const Cand& a, const Cand& b) {
    return a.score != b.score ? a.score < b.score : a.sym > b.sym;
  };
  thread_local std::vector<Cand> heap;
  heap.clear();
  auto push = [&](int32_t sym) {
    if (sym < 0) return;
    const int32_t nx = s.next[static_cast<size_t>(sym)];
    if (nx < 0) return;
    const auto a = static_cast<size_t>(sym);
    const int32_t ll = s.len[a], rl = s.len[static_cast<size_t>(nx)];
    const int32_t id =
        find_piece(text.substr(static_cast<size_t>(s.start[a]), static_cast<size_t>(ll + rl)));
    if (id < 0) return;
    heap.push_back({vocab_.scores[static_cast<size_t>(id)], sym, ll, rl});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Cand c = heap.back();
    heap.pop_back();
    const auto a = static_cast<size_t>(c.sym);
    const int32_t b = s.next[a];
    // Stale: one of the two symbols has merged with something else since.
    if (s.len[a] != c.left_len || b < 0 || s.len[static_cast<size_t>(b)] != c.right_len) continue;
    s.len[a] += c.right_len;
    const int32_t bn = s.next[static_cast<size_t>(b)];
    s.next[a] = bn;
    if (bn >= 0) s.prev[static_cast<size_t>(bn)] = c.sym;
    s.len[static_cast<size_t>(b)] = 0;  // dead
    push(s.prev[a]);
    push(c.sym);
  }
  for (int32_t i = 0; i >= 0; i = s.next[static_cast<size_t>(i)]) {
    const auto k = static_cast<size_t>(i);
    emit_symbol(text.substr(static_cast<size_t>(s.start[k]), static_cast<size_t>(s.len[k])),
                at + static_cast<size_t>(s.start[k]), out, unknowns);
  }
}

}  // namespace tally
