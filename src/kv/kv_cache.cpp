#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "kernels/kv_quant.h"

namespace tally {

namespace {

int64_t pool_blocks(int64_t n_ctx, int64_t block_size) {
  if (n_ctx <= 0) fail("context size must be positive, got {}", n_ctx);
  if (n_ctx > kMaxContextTokens) fail("context size {} is above the limit of {} tokens", n_ctx, kMaxContextTokens);
  if (block_size <= 0 || block_size > kMaxContextTokens)
    fail("KV block size must be from 1 to {}, got {}", kMaxContextTokens, block_size);
  return (n_ctx + block_size - 1) / block_size;
}

bool any_window_layer(const KvCacheOptions& o) {
  return o.window > 0 && std::find(o.window_layers.begin(), o.window_layers.end(), true) != o.window_layers.end();
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The key of a block: its parent's key (kRootKey for block 0) and its tokens.
constexpr uint64_t kRootKey = 0x7a11'7a11'7a11'7a11ull;
uint64_t chain_key(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace

// The window pool: per sequence a window range and the block being written
// (plus one when a copy-on-write keeps the shared original), and one step's
// blocks; never more than the full layers' pool.
int64_t kv_window_pool_blocks(const KvCacheOptions& o, int64_t n_blocks) {
  if (!any_window_layer(o)) return 0;
  if (o.max_sequences < 1 || o.max_batch < 1)
    fail("a KV cache with window layers needs max_sequences and max_batch of at least 1, got {} and {}",
         o.max_sequences, o.max_batch);
  const int64_t bs = o.block_size;
  const int64_t per_seq = std::min(n_blocks, (o.window + bs - 1) / bs + 2);
  const int64_t step = std::min(n_blocks, (o.max_batch + bs - 1) / bs);
  return std::min(n_blocks, std::min(o.max_sequences, n_blocks) * per_seq + step);
}

uint64_t kv_cache_planned_bytes(const KvShape& shape, const KvCacheOptions& o) {
  const int64_t n_blocks = pool_blocks(o.n_ctx, o.block_size);
  const int64_t window_layers = any_window_layer(o) ? std::count(o.window_layers.begin(), o.window_layers.end(), true) : 0;
  return KvStorage::planned_bytes(shape, o.block_size, n_blocks, o.type, window_layers,
                                  kv_window_pool_blocks(o, n_blocks));
}

KvCache::KvCache(const KvShape& shape, const KvCacheOptions& o)
    : storage_(shape, o.block_size, pool_blocks(o.n_ctx, o.block_size), o.type,
               o.budget_bytes ? o.budget_bytes : available_memory_bytes(),
               any_window_layer(o) ? o.window_layers : std::vector<bool>{},
               kv_window_pool_blocks(o, pool_blocks(o.n_ctx, o.block_size))),
      alloc_(storage_.n_blocks()),
      n_ctx_(o.n_ctx),
      prefix_cache_(o.prefix_cache),
      block_tokens_(prefix_cache_ ? static_cast<size_t>(storage_.n_blocks() * o.block_size) : 0),
      parent_(prefix_cache_ ? storage_.n_blocks() : 0, -1),
      parent_version_(prefix_cache_ ? storage_.n_blocks() : 0, 0),
      window_(any_window_layer(o) ? o.window : 0) {
  if (!windowed()) return;
  window_slot_.assign(static_cast<size_t>(storage_.n_blocks()), -1);
  for (int64_t i = storage_.n_window_blocks() - 1; i >= 0; --i) free_slots_.push_back(static_cast<int32_t>(i));
}

const KvCache::Sequence& KvCache::get(SeqId seq) const {
  if (seq.slot < 0 || seq.slot >= static_cast<int32_t>(seqs_.size()))
    fail("KV cache has no sequence {}", seq.slot);
  const Sequence& s = seqs_[seq.slot];
  if (!s.live || s.gen != seq.gen)
    fail("KV cache sequence {} (generation {}) was freed; its id is no longer valid", seq.slot, seq.gen);
  return s;
}
KvCache::Sequence& KvCache::get(SeqId seq) { return const_cast<Sequence&>(std::as_const(*this).get(seq)); }

KvCache::SeqId KvCache::new_sequence(int64_t max_len) {
  if (max_len < 0 || max_len > n_ctx_)
    fail("a sequence of at most {} positions does not fit the pool of {}", max_len, n_ctx_);
  size_t slot = 0;
  while (slot < seqs_.size() && seqs_[slot].live) ++slot;
  if (slot == seqs_.size()) seqs_.emplace_back();
  Sequence& s = seqs_[slot];
  const uint32_t gen = s.gen + 1;
  s = Sequence{};
  s.live = true;
  s.gen = gen;
  s.max_len = max_len == 0 ? n_ctx_ : max_len;
  return {static_cast<int32_t>(slot), gen};
}

KvCache::SeqId KvCache::create_sequence(int64_t max_len) { return new_sequence(max_len); }

std::vector<int32_t> KvCache::walk_prefix(std::span<const int32_t> tokens, int64_t limit,
                                          std::vector<uint64_t>* keys) const {
  std::vector<int32_t> found;
  if (!prefix_cache_) return found;
  const int64_t bs = block_size();
  limit = std::min(limit, static_cast<int64_t>(tokens.size()));
  uint64_t key = kRootKey;
  int32_t parent = -1;
  uint32_t parent_version = 0;
  for (int64_t i = 0; (i + 1) * bs <= limit; ++i) {
    const auto chunk = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    key = chain_key(key, chunk);
    const auto b = alloc_.find(key);
    if (!b) break;
    const int32_t* stored = block_tokens_.data() + static_cast<size_t>(*b) * bs;
    if (!std::equal(chunk.begin(), chunk.end(), stored) || parent_[*b] != parent ||
        parent_version_[*b] != parent_version)
      break;  // a hash collision: a different prefix under the same key
    found.push_back(*b);
    if (keys) keys->push_back(key);
    parent = *b;
    parent_version = alloc_.version(*b);
  }
  // A prefix serves only as far as its window range is still held.
  while (windowed() && !found.empty()) {
    const int64_t n = static_cast<int64_t>(found.size());
    if (window_held(found, window_first_block(n * bs), n)) break;
    found.pop_back();
    if (keys) keys->pop_back();
  }
  return found;
}

KvCache::PrefixProbe KvCache::probe_prefix(std::span<const int32_t> tokens, int64_t limit) const {
  PrefixProbe p;
  for (int32_t b : walk_prefix(tokens, limit, nullptr)) {
    p.positions += block_size();
    p.evictable_blocks += alloc_.owners(b) == 0;
  }
  return p;
}

KvCache::SeqId KvCache::create_sequence_from_prefix(std::span<const int32_t> tokens, int64_t limit, int64_t max_len) {
  const SeqId id = new_sequence(max_len);
  if (!prefix_cache_) return id;
  Sequence& s = seqs_[id.slot];
  ++lookups_;
  s.blocks = walk_prefix(tokens, std::min(limit, s.max_len), &s.keys);
  for (int32_t b : s.blocks) alloc_.take(b);
  s.length = static_cast<int64_t>(s.blocks.size()) * block_size();
  s.tokens.assign(tokens.begin(), tokens.begin() + s.length);
  hit_tokens_ += static_cast<uint64_t>(s.length);
  sync_window(s);
  return id;
}

KvCache::SeqId KvCache::fork(SeqId src) {
  get(src);  // refuses a stale or unknown id before a slot is taken
  const SeqId id = new_sequence(get(src).max_len);
  Sequence& s = seqs_[id.slot];
  const Sequence& from = get(src);
  s.blocks = from.blocks;
  s.length = from.length;
  s.tokens = from.tokens;
  s.keyable = from.keyable;
  s.keys = from.keys;
  for (int32_t b : s.blocks) alloc_.retain(b);
  sync_window(s);
  return id;
}

int32_t KvCache::copy_of(int32_t block) {
  const bool slot = windowed() && window_slot_[block] >= 0;
  const int32_t fresh = fresh_block(slot);
  copied_bytes_ += storage_.copy_block(fresh, block);
  if (slot) copied_bytes_ += storage_.copy_window_block(window_slot_[fresh], window_slot_[block]);
  ++copied_blocks_;
  return fresh;
}

int32_t KvCache::fresh_block(bool with_slot) {
  const auto b = alloc_.allocate();
  if (!b) fail("KV cache out of blocks ({} in the pool)", alloc_.total_blocks());
  if (!windowed()) return *b;
  // An evicted cached block may bring its old slot along.
  if (with_slot) {
    give_slot(*b);
  } else {
    drop_slot(*b);
  }
  return *b;
}

void KvCache::give_slot(int32_t block) {
  if (window_slot_[block] >= 0) return;
  if (free_slots_.empty()) fail("KV cache out of window slots ({} in the pool)", storage_.n_window_blocks());
  window_slot_[block] = free_slots_.back();
  free_slots_.pop_back();
}

void KvCache::drop_slot(int32_t block) {
  if (window_slot_[block] < 0) return;
  free_slots_.push_back(window_slot_[block]);
  window_slot_[block] = -1;
}

void KvCache::release_block(int32_t block) {
  alloc_.release(block);
  if (windowed() && alloc_.owners(block) == 0 && !alloc_.keyed(block)) drop_slot(block);
}

int64_t KvCache::window_first_block(int64_t length) const {
  return std::max<int64_t>(0, length + 1 - window_) / block_size();
}

bool KvCache::window_held(const std::vector<int32_t>& blocks, int64_t first, int64_t end) const {
  for (int64_t i = first; i < end; ++i)
    if (window_slot_[blocks[static_cast<size_t>(i)]] < 0) return false;
  return true;
}

bool KvCache::reserve_window_slots(int64_t n) {
  if (static_cast<int64_t>(free_slots_.size()) < n) take_back_window_slots();
  return static_cast<int64_t>(free_slots_.size()) >= n;
}

std::vector<uint8_t> KvCache::window_needed() const {
  std::vector<uint8_t> needed(window_slot_.size(), 0);
  for (const Sequence& s : seqs_)
    if (s.live)
      for (size_t i = static_cast<size_t>(window_first_block(s.length)); i < s.blocks.size(); ++i)
        needed[static_cast<size_t>(s.blocks[i])] = 1;
  return needed;
}

int64_t KvCache::available_blocks() const {
  if (!windowed()) return alloc_.available_blocks();
  const std::vector<uint8_t> needed = window_needed();
  int64_t slots = static_cast<int64_t>(free_slots_.size());
  for (size_t b = 0; b < window_slot_.size(); ++b) slots += window_slot_[b] >= 0 && !needed[b];
  return std::min(alloc_.available_blocks(), slots);
}

void KvCache::take_back_window_slots() {
  const std::vector<uint8_t> needed = window_needed();
  for (size_t b = 0; b < window_slot_.size(); ++b)
    if (!needed[b]) drop_slot(static_cast<int32_t>(b));
  for (Sequence& s : seqs_)
    if (s.live) sync_window(s);
}

void KvCache::sync_window(Sequence& s) {
  if (!windowed()) return;
  s.window_blocks.resize(s.blocks.size());
  for (size_t i = 0; i < s.blocks.size(); ++i) s.window_blocks[i] = window_slot_[static_cast<size_t>(s.blocks[i])];
}

KvCache::SeqId KvCache::fork_copy(SeqId src) {
  const int64_t n = static_cast<int64_t>(get(src).blocks.size());
  if (n > alloc_.available_blocks())
    fail("KV cache out of blocks: a copy of {} blocks, {} of {} available", n, alloc_.available_blocks(),
         alloc_.total_blocks());
  if (windowed()) {
    int64_t slots = 0;
    for (int32_t b : get(src).blocks) slots += window_slot_[b] >= 0;
    if (!reserve_window_slots(slots))
      fail("KV cache out of window slots: a copy of {} window blocks, {} of {} free", slots, free_slots_.size(),
           storage_.n_window_blocks());
  }
  const SeqId id = new_sequence(get(src).max_len);
  Sequence& s = seqs_[id.slot];
  const Sequence& from = get(src);
  for (int32_t b : from.blocks) s.blocks.push_back(copy_of(b));
  sync_window(s);
  s.length = from.length;
  s.tokens = from.tokens;
  s.keyable = from.keyable;
  s.keys = from.keys;  // the copies stay unkeyed; the keys chain on for later blocks
  return id;
}

void KvCache::free_sequence(SeqId seq) {
  Sequence& s = get(seq);
  // Last block first: a cached prefix loses its tail before its head.
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) release_block(*b);
  const uint32_t gen = s.gen;
  s = Sequence{};
  s.gen = gen;  // kept: the slot's next sequence gets gen + 1, and this id stays refused
}

int64_t KvCache::blocks_needed(SeqId seq, int64_t to) const {
  const Sequence& s = get(seq);
  const int64_t bs = block_size();
  int64_t need = std::max<int64_t>(0, (to + bs - 1) / bs - static_cast<int64_t>(s.blocks.size()));
  const bool partial_last = s.length % bs != 0 && !s.blocks.empty();
  if (to > s.length && partial_last && (alloc_.owners(s.blocks.back()) > 1 || alloc_.keyed(s.blocks.back()))) ++need;
  return need;
}

void KvCache::reserve(Sequence& s, SeqId seq, int64_t start, int64_t n) {
  if (start != s.length)
    fail("broken continuity: write at position {} but sequence {} holds positions [0, {}); "
         "the next write must start at {}",
         start, seq.slot, s.length, s.length);
  if (n < 0) fail("cannot write {} positions", n);
  if (start + n > s.max_len) {
    if (s.max_len == n_ctx_)
      fail("context full: sequence {} has {} positions and {} more exceed the context size {}", seq.slot, start, n,
           n_ctx_);
    fail("sequence {} is full: {} positions and {} more exceed its maximum of {}", seq.slot, start, n, s.max_len);
  }
  const int64_t need = blocks_needed(seq, start + n);
  if (need > alloc_.available_blocks())
    fail("KV cache out of blocks: {} positions requested, {} more blocks needed and {} of {} x {} positions free",
         start + n, need, alloc_.available_blocks(), alloc_.total_blocks(), block_size());
  // Every block this write touches is in the window range of one of its queries: each needs a slot.
  if (windowed() && !reserve_window_slots(need))
    fail("KV cache out of window slots: sequence {} needs {} more for positions [{}, {}) and {} of {} are free "
         "(the window pool holds a window and a step for each of the sequences it was sized for)",
         seq.slot, need, start, start + n, free_slots_.size(), storage_.n_window_blocks());
  const int64_t bs = block_size();
  // The partly filled last block: shared (fork) or keyed, it is copied before this sequence writes into it.
  if (n > 0 && start % bs != 0) {
    const int32_t last = s.blocks.back();
    if (alloc_.owners(last) > 1 || alloc_.keyed(last)) {
      s.blocks.back() = copy_of(last);
      release_block(last);
    }
  }
  while (static_cast<int64_t>(s.blocks.size()) * bs < start + n) s.blocks.push_back(fresh_block(true));
  s.length = start + n;
  sync_window(s);
}

void KvCache::begin_write(SeqId seq, int64_t start, std::span<const int32_t> tokens) {
  Sequence& s = get(seq);
  reserve(s, seq, start, static_cast<int64_t>(tokens.size()));
  if (s.keyable) s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
}

void KvCache::begin_write(SeqId seq, int64_t start, int64_t n) {
  Sequence& s = get(seq);
  reserve(s, seq, start, n);
  if (n > 0) {
    s.keyable = false;
    s.tokens.clear();
  }
}

void KvCache::end_write(SeqId seq) {
  Sequence& s = get(seq);
  if (!prefix_cache_ || !s.keyable) return;
  const int64_t bs = block_size(), full = s.length / bs;
  for (int64_t i = static_cast<int64_t>(s.keys.size()); i < full; ++i) {
    const uint64_t key = chain_key(i == 0 ? kRootKey : s.keys.back(),
                                   std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(i * bs), bs));
    s.keys.push_back(key);
    const int32_t b = s.blocks[i];
    if (alloc_.keyed(b) || !alloc_.set_key(b, key)) continue;  // taken from the cache, or another block has it
    std::copy_n(s.tokens.begin() + i * bs, bs, block_tokens_.begin() + static_cast<ptrdiff_t>(b) * bs);
    parent_[b] = i == 0 ? -1 : s.blocks[i - 1];
    parent_version_[b] = i == 0 ? 0 : alloc_.version(s.blocks[i - 1]);
  }
}

int64_t KvCache::resume_point(SeqId seq, int64_t n) const {
  const Sequence& s = get(seq);
  if (n < 0 || n > s.length) fail("no position {} in sequence {} of {} positions", n, seq.slot, s.length);
  if (!windowed()) return n;
  const int64_t bs = block_size();
  int64_t m = n;
  while (m > 0) {
    int64_t missing = -1;
    for (int64_t i = (m + bs - 1) / bs - 1; i >= window_first_block(m) && missing < 0; --i)
      if (window_slot_[s.blocks[static_cast<size_t>(i)]] < 0) missing = i;
    if (missing < 0) break;
    m = missing * bs;  // the positions before the block whose slot is gone
  }
  return m;
}

void KvCache::trim_window(SeqId seq) {
  Sequence& s = get(seq);
  if (!windowed()) return;
  for (int64_t i = 0; i < window_first_block(s.length); ++i) {
    const int32_t b = s.blocks[static_cast<size_t>(i)];
    if (alloc_.owners(b) == 1 && !alloc_.keyed(b)) drop_slot(b);
  }
  sync_window(s);
}

bool KvCache::holds(int64_t layer, SeqId seq, int64_t pos) const {
  const Sequence& s = get(seq);
  if (pos < 0 || pos >= s.length) return false;
  return !storage_.window_layer(layer) || window_slot_[s.blocks[static_cast<size_t>(pos / block_size())]] >= 0;
}

void KvCache::truncate(SeqId seq, int64_t n) {
  Sequence& s = get(seq);
  if (n < 0 || n > s.length) fail("cannot truncate sequence {} of {} positions to {}", seq.slot, s.length, n);
  if (const int64_t m = resume_point(seq, n); m != n)
    fail("cannot truncate sequence {} to {} positions: its sliding-window layers no longer hold the {} before "
         "them (it can go back to {})",
         seq.slot, n, window_ - 1, m);
  const int64_t bs = block_size();
  const int64_t keep = (n + bs - 1) / bs;
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
  if (s.keyable) s.tokens.resize(static_cast<size_t>(n));
  if (static_cast<int64_t>(s.keys.size()) > n / bs) s.keys.resize(static_cast<size_t>(n / bs));
  // A keyed block now partly past the length will be written again: only its
  // sole owner may forget the key (shared, it is copied on the next write).
  if (n % bs != 0 && alloc_.keyed(s.blocks.back()) && alloc_.owners(s.blocks.back()) == 1) alloc_.unkey(s.blocks.back());
  sync_window(s);
}

void KvCache::remove_positions(SeqId seq, int64_t from, int64_t n,
                               const std::function<void(int64_t, float*)>& fix_key) {
  Sequence& s = get(seq);
  if (from < 0 || n < 0 || from + n > s.length)
    fail("cannot remove positions [{}, {}) of sequence {} of {} positions", from, from + n, seq.slot, s.length);
  if (n == 0) return;
  const int64_t bs = block_size(), len = s.length - n;
  const size_t first = static_cast<size_t>(from / bs);
  // Window layers: destination block d takes its moved positions there only
  // when it can hold all of them (every source block and, for a block that
  // keeps unmoved positions below `from`, itself has a slot); the others
  // lose their slot. Only the window range of the new length must be held.
  std::vector<uint8_t> moved(s.blocks.size(), 0);
  int64_t slots = 0;
  if (windowed()) {
    take_back_window_slots();
    auto has = [&](int64_t pos) { return window_slot_[s.blocks[static_cast<size_t>(pos / bs)]] >= 0; };
    for (int64_t d = std::min(window_first_block(len), from / bs); d * bs < len; ++d) {
      const int64_t lo = std::max(d * bs, from), hi = std::min((d + 1) * bs, len);
      bool ok = lo == d * bs || has(d * bs);  // unmoved positions below `from` stay where they are
      for (int64_t q = lo; q < hi && ok; ++q) ok = has(q + n);
      if (d >= from / bs) {
        moved[static_cast<size_t>(d)] = ok;
        slots += ok && !has(d * bs);
      }
      if (d >= window_first_block(len) && !ok)
        fail("cannot move positions [{}, {}) down by {}: the sliding-window layers no longer hold what the new "
             "window needs (lower --sinks or raise --window)",
             from + n, s.length, n);
    }
  }
  // Every block from `from` on is rewritten: it must be this sequence's alone and unkeyed.
  int64_t copies = 0;
  for (size_t i = first; i < s.blocks.size(); ++i) {
    copies += alloc_.owners(s.blocks[i]) > 1;
    slots += windowed() && alloc_.owners(s.blocks[i]) > 1 && window_slot_[s.blocks[i]] >= 0;
  }
  if (copies > alloc_.available_blocks())
    fail("KV cache out of blocks: moving positions needs {} copies, {} blocks free", copies, alloc_.available_blocks());
  if (slots > static_cast<int64_t>(free_slots_.size()))
    fail("KV cache out of window slots: moving positions needs {}, {} free", slots, free_slots_.size());
  for (size_t i = first; i < s.blocks.size(); ++i) {
    const int32_t b = s.blocks[i];
    if (alloc_.owners(b) > 1) {
      s.blocks[i] = copy_of(b);
      release_block(b);
    } else {
      alloc_.unkey(b);
    }
    if (windowed() && moved[i]) give_slot(s.blocks[i]);
  }
  // Values move as stored bytes; keys go through f32 (dequantized, fixed,
  // stored again: a quantized key is requantized once per slide).
  const int64_t hd = storage_.shape().n_kv_head * storage_.shape().head_dim;
  const uint64_t raw = storage_.vec_bytes() * static_cast<uint64_t>(storage_.shape().n_kv_head);
  std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));
  std::vector<uint8_t> kr(raw), vr(raw);
  for (int64_t p = from + n; p < s.length; ++p)
    for (int64_t l = 0; l < storage_.shape().n_layer; ++l) {
      if (storage_.window_layer(l) && !moved[static_cast<size_t>((p - n) / bs)]) continue;
      load(l, seq, p, k.data(), v.data());
      load_raw(l, seq, p, kr.data(), vr.data());
      fix_key(l, k.data());
      store(l, seq, p - n, k.data(), v.data());
      store_raw_v(l, seq, p - n, vr.data());
    }
  // A block that kept no moved positions holds stale ones: its slot goes.
  for (size_t d = first; windowed() && d < s.blocks.size(); ++d)
    if (!moved[d]) drop_slot(s.blocks[d]);
  sync_window(s);
  if (s.keyable) s.tokens.erase(s.tokens.begin() + from, s.tokens.begin() + from + n);
  if (static_cast<int64_t>(s.keys.size()) > from / bs) s.keys.resize(static_cast<size_t>(from / bs));
  truncate(seq, len);
}

template <class Copy>
void KvCache::each_head(int64_t layer, SeqId seq, int64_t pos, const char* what, Copy copy) const {
  const Sequence& s = get(seq);
  if (pos < 0 || pos >= s.length) fail("{} at position {} outside [0, {})", what, pos, s.length);
  const int64_t bs = storage_.block_size();
  if (layer < 0 || layer >= storage_.shape().n_layer) fail("{} in layer {} of {}", what, layer, storage_.shape().n_layer);
  const int32_t b = s.blocks[static_cast<size_t>(pos / bs)];
  const int64_t block = storage_.window_layer(layer) ? window_slot_[static_cast<size_t>(b)] : b, row = pos % bs;
  if (block < 0)
    fail("{} at position {} of sliding-window layer {}: the window moved past it and its slot was taken back", what,
         pos, layer);
  const auto& sh = storage_.shape();
  const uint64_t vec = storage_.vec_bytes();
  for (int64_t h = 0; h < sh.n_kv_head; ++h) {
    const uint64_t off = (static_cast<uint64_t>(h) * bs + row) * vec;
    copy(off, h * vec, vec, block, h);
  }
}

void KvCache::store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v) {
  const int64_t hd = storage_.shape().head_dim;
  const DType t = storage_.type();
  each_head(layer, seq, pos, "store", [&](uint64_t off, uint64_t, uint64_t, int64_t block, int64_t h) {
    kv_store_row(t, k + h * hd, storage_.k_block(layer, block) + off, hd);
    kv_store_row(t, v + h * hd, storage_.v_block(layer, block) + off, hd);
  });
}

void KvCache::load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const {
  const int64_t hd = storage_.shape().head_dim;
  const DType t = storage_.type();
  each_head(layer, seq, pos, "load", [&](uint64_t off, uint64_t, uint64_t, int64_t block, int64_t h) {
    kv_load_row(t, storage_.k_block(layer, block) + off, k + h * hd, hd);
    kv_load_row(t, storage_.v_block(layer, block) + off, v + h * hd, hd);
  });
}

void KvCache::store_raw(int64_t layer, SeqId seq, int64_t pos, const uint8_t* k, const uint8_t* v) {
  each_head(layer, seq, pos, "store", [&](uint64_t off, uint64_t at, uint64_t n, int64_t block, int64_t) {
    std::memcpy(storage_.k_block(layer, block) + off, k + at, n);
    std::memcpy(storage_.v_block(layer, block) + off, v + at, n);
  });
}

void KvCache::store_raw_v(int64_t layer, SeqId seq, int64_t pos, const uint8_t* v) {
  each_head(layer, seq, pos, "store", [&](uint64_t off, uint64_t at, uint64_t n, int64_t block, int64_t) {
    std::memcpy(storage_.v_block(layer, block) + off, v + at, n);
  });
}

void KvCache::load_raw(int64_t layer, SeqId seq, int64_t pos, uint8_t* k, uint8_t* v) const {
  each_head(layer, seq, pos, "load", [&](uint64_t off, uint64_t at, uint64_t n, int64_t block, int64_t) {
    std::memcpy(k + at, storage_.k_block(layer, block) + off, n);
    std::memcpy(v + at, storage_.v_block(layer, block) + off, n);
  });
}

KvLayerView KvCache::view(int64_t layer, SeqId seq) const {
  const Sequence& s = get(seq);
  KvLayerView v;
  v.k_layer = storage_.k_block(layer, 0);
  v.v_layer = storage_.v_block(layer, 0);
  v.block_bytes = storage_.block_bytes();
  v.blocks = storage_.window_layer(layer) ? s.window_blocks.data() : s.blocks.data();
  v.length = s.length;
  v.block_size = storage_.block_size();
  v.n_kv_head = storage_.shape().n_kv_head;
  v.head_dim = storage_.shape().head_dim;
  v.head_stride = v.block_size * v.head_dim;
  v.pos_stride = v.head_dim;
  v.type = storage_.type();
  return v;
}

KvCacheStats KvCache::stats() const {
  KvCacheStats st;
  st.lookups = lookups_;
  st.hit_tokens = hit_tokens_;
  st.evictions = alloc_.evictions();
  st.copied_blocks = copied_blocks_;
  st.copied_bytes = copied_bytes_;
  st.blocks_free = alloc_.free_blocks();
  st.blocks_cached = alloc_.evictable_blocks();
  st.blocks_used = alloc_.used_blocks();
  st.window_slots = storage_.n_window_blocks();
  st.window_slots_used = st.window_slots - static_cast<int64_t>(free_slots_.size());
  return st;
}

}  // namespace tally
