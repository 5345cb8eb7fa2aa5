#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/printable.h"
#include "tokenizer/byte_unicode.h"

namespace tally {
namespace {

uint64_t next_instance() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

// Pre-tokens repeat a lot in real text (words, indentation), so each thread
// remembers the tokens of the short pieces it has seen, for one model at a
// time. Per thread, so encode stays lock-free.
struct PieceCache {
  static constexpr size_t kMaxPiece = 32;       // longer pieces are rare: not cached
  static constexpr size_t kMaxEntries = 1 << 16;  // then start over
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> index;
  std::vector<int32_t> ids;  // index values are (offset, count) into this

  void reset(uint64_t who) {
    owner = who;
    index.clear();
    ids.clear();
  }
};

}  // namespace

BpeModel::BpeModel(const Vocab& vocab, const std::vector<std::string>& merges)
    : instance_(next_instance()), source_(vocab.source) {
  for (int b = 0; b < 256; ++b) {
    const int32_t id = vocab.find(byte_unicode::byte_to_utf8(static_cast<uint8_t>(b)));
    byte_token_[static_cast<size_t>(b)] = id;
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    // The parts never contain a space (it is 'Ġ' in the byte alphabet), but a
    // part may start with one in hand-written files: split at the first space
    // after the first character.
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos)
      fail("{}: tokenizer.ggml.merges[{}] = '{}' is not of the form 'A B'", source_, rank, excerpt(m));
    const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t ia = vocab.find(a), ib = vocab.find(b);
    if (ia < 0 || ib < 0) continue;
    std::string joined;
    joined.reserve(a.size() + b.size());
    joined.append(a).append(b);
    const int32_t ir = vocab.find(joined);
    if (ir < 0) continue;
    merges_.insert(ia, ib, {static_cast<int32_t>(rank), ir});  // the first rank wins
  }
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.size() > PieceCache::kMaxPiece || bytes.size() < 2) {
    merge_piece(bytes, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != instance_ || cache.index.size() >= PieceCache::kMaxEntries) cache.reset(instance_);
  if (auto it = cache.index.find(bytes); it != cache.index.end()) {
    const auto [off, cnt] = it->second;
    out.insert(out.end(), cache.ids.begin() + off, cache.ids.begin() + off + cnt);
    return;
  }
  const size_t before = out.size();
  merge_piece(bytes, out);
  const auto off = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  cache.index.emplace(bytes, std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
}

void BpeModel::merge_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  // Symbols live in a doubly linked list; a merged symbol keeps the slot of
  // its left part. Bytes without a token are dropped, as the reference
  // tokenizer does (e.g. SmolLM2 has no token for 0x04 or 0xF1). Scratch
  // space is per thread.
  struct Scratch {
    std::vector<int32_t> id, prev, next;
  };
  thread_local Scratch s;
  s.id.clear();
  for (char c : bytes)
    if (const int32_t id = byte_token_[static_cast<uint8_t>(c)]; id >= 0) s.id.push_back(id);
  const size_t n = s.id.size();
  if (n <= 1) {
    if (n == 1) out.push_back(s.id[0]);
    return;
  }
  s.prev.resize(n);
  s.next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.prev[i] = static_cast<int32_t>(i) - 1;
    s.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }

  // Candidate pairs ordered by (rank, left position); entries go stale when a
  // neighbour merges and are checked against the current symbols when popped.
  struct Cand {
    int32_t rank, pos, left, right, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Cand> heap;
  heap.clear();
  const auto later = std::greater<Cand>{};  // min-heap on (rank, pos)
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = s.next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    const int32_t l = s.id[static_cast<size_t>(pos)], r = s.id[static_cast<size_t>(nx)];
    if (const PairMap::Value* m = merges_.find(l, r)) {
      heap.push_back({m->rank, pos, l, r, m->result});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    const auto p = static_cast<size_t>(c.pos);
    const int32_t q = s.next[p];
    if (s.id[p] != c.left || q < 0 || s.id[static_cast<size_t>(q)] != c.right) continue;  // stale
    s.id[p] = c.result;
    const int32_t qn = s.next[static_cast<size_t>(q)];
    s.next[p] = qn;
    if (qn >= 0) s.prev[static_cast<size_t>(qn)] = c.pos;
    s.id[static_cast<size_t>(q)] = -1;  // dead
    push(s.prev[p]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = s.next[static_cast<size_t>(i)])
    out.push_back(s.id[static_cast<size_t>(i)]);
}

}  // namespace tally
