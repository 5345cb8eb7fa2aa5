#include "kv/kv_cache.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/error.h"

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
      slots_(storage_.n_window_blocks(), any_window_layer(o) ? storage_.n_blocks() : 0),
      n_ctx_(o.n_ctx),
      window_(any_window_layer(o) ? o.window : 0) {
  if (o.prefix_cache) index_.emplace(storage_.n_blocks(), storage_.block_size());
  if (o.prefix_cache && !o.disk.dir.empty())
    disk_ = std::make_unique<KvDisk>(o.disk, KvDiskLayout{o.model_fingerprint, storage_.type(), storage_.block_size(),
                                                          shape.n_layer, storage_.n_window_layers(),
                                                          storage_.block_bytes()});
  // A restore holds its files open until it is read: half the process's
  // limit at most (more blocks than that are read at once instead).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0)
    max_open_files_ = files.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(files.rlim_cur / 2);
}

KvCache::SeqId KvCache::new_sequence(int64_t max_len) {
  if (max_len < 0 || max_len > n_ctx_)
    fail("a sequence of at most {} positions does not fit the pool of {}", max_len, n_ctx_);
  const SeqId id = seqs_.create();
  seqs_.get(id).max_len = max_len == 0 ? n_ctx_ : max_len;
  return id;
}

KvCache::SeqId KvCache::create_sequence(int64_t max_len) { return new_sequence(max_len); }

int64_t KvCache::covering(std::span<const int32_t> tokens, int64_t limit) const {
  return std::min(blocks_for(limit) * block_size(), static_cast<int64_t>(tokens.size()));
}

std::vector<int32_t> KvCache::cached_prefix(std::span<const int32_t> tokens, int64_t limit,
                                            std::vector<uint64_t>* keys) const {
  if (!index_) return {};
  std::vector<int32_t> found = index_->walk(tokens, covering(tokens, limit), alloc_, keys);
  // A prefix serves only as far as its window range is still held.
  while (windowed() && !found.empty()) {
    const int64_t n = static_cast<int64_t>(found.size());
    if (window_held(found, window_first_block(hit_length(n, limit)), n)) break;
    found.pop_back();
    if (keys) keys->pop_back();
  }
  return found;
}

KvCache::PrefixProbe KvCache::probe_prefix(std::span<const int32_t> tokens, int64_t limit) const {
  PrefixProbe p;
  limit = std::min(limit, static_cast<int64_t>(tokens.size()));
  const std::vector<int32_t> found = cached_prefix(tokens, limit, nullptr);
  for (int32_t b : found) p.evictable_blocks += alloc_.owners(b) == 0;
  const int64_t in_ram = static_cast<int64_t>(found.size());
  p.positions = hit_length(in_ram, limit);
  if (disk_) {
    const int64_t bs = block_size(), cover = covering(tokens, limit);
    BlockDigest d = disk_->root();
    int64_t on_disk = 0;
    for (int64_t i = 0; (i + 1) * bs <= cover; ++i) {
      d = KvDisk::chain(d, tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs)));
      if (i < in_ram) continue;
      if (!disk_->has(d)) break;
      ++on_disk;
    }
    p.disk_positions = hit_length(in_ram + on_disk, limit) - p.positions;
  }
  return p;
}

KvCache::SeqId KvCache::create_sequence_from_prefix(std::span<const int32_t> tokens, int64_t limit, int64_t max_len,
                                                    int64_t* from_disk) {
  // A prompt that starts as the sequence being restored does would find its
  // blocks in RAM once they are indexed: it waits for them.
  if (restore_) {
    const auto pending = std::span<const int32_t>(seqs_.get(restore_seq_).tokens);
    const size_t n = static_cast<size_t>(block_size());
    if (tokens.size() >= n && pending.size() >= n && std::equal(tokens.begin(), tokens.begin() + n, pending.begin()))
      settle_restore();
  }
  const SeqId id = new_sequence(max_len);
  if (from_disk) *from_disk = 0;
  if (!index_) return id;
  KvSequence& s = seqs_.get(id);
  ++lookups_;
  limit = std::min({limit, s.max_len, static_cast<int64_t>(tokens.size())});
  s.blocks = cached_prefix(tokens, limit, &s.keys);
  for (int32_t b : s.blocks) take_block(b);
  const size_t in_ram = s.blocks.size();
  if (disk_) {
    restore_from_disk(id, tokens, limit);
    // A prefix serves only as far as its window range has slots (a block
    // whose load failed leaves the range over restored blocks without any).
    while (windowed() && s.blocks.size() > in_ram) {
      const int64_t n = static_cast<int64_t>(s.blocks.size());
      if (window_held(s.blocks, window_first_block(hit_length(n, limit)), n)) break;
      release_block(s.blocks.back());
      s.blocks.pop_back();
      s.keys.pop_back();
      s.digests.pop_back();
    }
  }
  s.length = hit_length(static_cast<int64_t>(s.blocks.size()), limit);
  // A hit that ends inside its last block keeps that block's key in the index
  // only: the sequence's next write copies the block (it is keyed), and the
  // copy is keyed once full, as any block is.
  const size_t keyed = static_cast<size_t>(s.length / block_size());
  if (s.keys.size() > keyed) s.keys.resize(keyed);
  if (s.digests.size() > keyed) s.digests.resize(keyed);
  s.tokens.assign(tokens.begin(), tokens.begin() + s.length);
  hit_tokens_ += static_cast<uint64_t>(s.length);
  const int64_t disk = std::max<int64_t>(0, s.length - static_cast<int64_t>(in_ram) * block_size());
  disk_hit_tokens_ += static_cast<uint64_t>(disk);
  if (from_disk) *from_disk = disk;
  sync_window(s);
  hold_window(s);
  return id;
}

// --- The disk tier ---

void KvCache::name_blocks(KvSequence& s) {
  const int64_t bs = block_size();
  for (size_t i = s.digests.size(); i < s.keys.size(); ++i) {
    const auto t = std::span<const int32_t>(s.tokens).subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs));
    s.digests.push_back(KvDisk::chain(i == 0 ? disk_->root() : s.digests.back(), t));
  }
}

void KvCache::write_block(int32_t block, const KvSequence& s, int64_t i) {
  const int64_t bs = block_size();
  const int32_t slot = windowed() ? slots_.slot(block) : -1;
  const auto t = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
  const size_t at = static_cast<size_t>(i);
  disk_->put(s.digests[at], at == 0 ? disk_->root() : s.digests[at - 1], t, slot >= 0, [&](uint8_t* out) {
    const uint64_t bb = storage_.block_bytes();
    auto take = [&](int64_t layer, int64_t b) {
      std::memcpy(out, storage_.k_block(layer, b), bb);
      std::memcpy(out + bb, storage_.v_block(layer, b), bb);
      out += 2 * bb;
    };
    for (int64_t l = 0; l < storage_.shape().n_layer; ++l)
      if (!storage_.window_layer(l)) take(l, block);
    if (slot >= 0)
      for (int64_t l = 0; l < storage_.shape().n_layer; ++l)
        if (storage_.window_layer(l)) take(l, slot);
  });
}

void KvCache::restore_from_disk(SeqId id, std::span<const int32_t> tokens, int64_t limit) {
  KvSequence& s = seqs_.get(id);
  const int64_t bs = block_size();
  auto block_tokens = [&](int64_t i) {
    return tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
  };
  s.digests.clear();
  for (int64_t i = 0; i < static_cast<int64_t>(s.blocks.size()); ++i)
    s.digests.push_back(KvDisk::chain(i == 0 ? disk_->root() : s.digests.back(), block_tokens(i)));
  // How far the files go decides which restored blocks need window slots.
  const int64_t first = static_cast<int64_t>(s.blocks.size());
  std::vector<BlockDigest> names;
  const int64_t cover = covering(tokens, limit);
  for (int64_t i = first; (i + 1) * bs <= cover; ++i) {
    const BlockDigest& parent = names.empty() ? (i == 0 ? disk_->root() : s.digests.back()) : names.back();
    BlockDigest d = KvDisk::chain(parent, block_tokens(i));
    if (!disk_->has(d)) {
      disk_->count_miss();
      break;
    }
    names.push_back(d);
  }
  disk_->prefetch(std::span<const BlockDigest>(names).first(
      std::min(names.size(), static_cast<size_t>(std::max<int64_t>(alloc_.available_blocks(), 0)))));
  const int64_t end = first + static_cast<int64_t>(names.size());
  const int64_t window_first = windowed() ? window_first_block(hit_length(end, limit)) : end;
  // The blocks the hit fills are read on a thread (their payloads checked
  // after); a partly used last block is read now, as the first write copies it.
  const int64_t later_end = windowed() ? first : std::min(end, hit_length(end, limit) / bs);
  const bool later = later_end - first <= max_open_files_;
  std::vector<KvRestore::Block> reads;
  for (int64_t i = first; i < end; ++i) {
    const bool slot = windowed() && i >= window_first;
    if (alloc_.available_blocks() == 0 || (slot && !reserve_window_slots(1))) break;
    const auto t = block_tokens(i);
    const BlockDigest& name = names[static_cast<size_t>(i - first)];
    const BlockDigest& parent_name = i == 0 ? disk_->root() : s.digests.back();
    const bool reading = later && i < later_end;
    int32_t b = -1;
    if (reading) {
      const auto t0 = std::chrono::steady_clock::now();
      std::optional<KvDiskFile> f = disk_->open(name, parent_name, t, false);
      disk_->count_load_time(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!f) break;
      b = fresh_block(false);
      KvRestore::Block r{std::move(*f), {}, {}};
      for (int64_t l = 0; l < storage_.shape().n_layer; ++l) {
        r.k.push_back(storage_.k_block(l, b));
        r.v.push_back(storage_.v_block(l, b));
      }
      reads.push_back(std::move(r));
    } else {
      b = fresh_block(slot);
      const bool ok = disk_->get(name, parent_name, t, slot, [&](const uint8_t* p, bool window) {
        const uint64_t bb = storage_.block_bytes();
        auto put = [&](int64_t layer, int64_t into) {
          std::memcpy(storage_.k_block(layer, into), p, bb);
          std::memcpy(storage_.v_block(layer, into), p + bb, bb);
          p += 2 * bb;
        };
        for (int64_t l = 0; l < storage_.shape().n_layer; ++l)
          if (!storage_.window_layer(l)) put(l, b);
        if (window && slot)
          for (int64_t l = 0; l < storage_.shape().n_layer; ++l)
            if (storage_.window_layer(l)) put(l, slots_.slot(b));
      });
      if (!ok) {
        release_block(b);
        break;
      }
    }
    s.keys.push_back(PrefixIndex::chain(i == 0 ? PrefixIndex::kRootKey : s.keys.back(), t));
    s.blocks.push_back(b);
    s.digests.push_back(name);
    // A block still being read is indexed when it passed its checks (settle_restore).
    if (!reading) index_block(s, static_cast<size_t>(i), t);
  }
  if (reads.empty()) return;
  settle_restore();  // one at a time
  restore_ = std::make_unique<KvRestore>(std::move(reads), storage_.block_bytes());
  restore_seq_ = id;
  restore_first_ = first;
}

void KvCache::settle_restore() {
  if (!restore_) return;
  const std::unique_ptr<KvRestore> r = std::move(restore_);
  const std::vector<char>& passed = r->finish();
  disk_->count_load_time(r->seconds());
  KvSequence& s = seqs_.get(restore_seq_);  // alive: freeing or truncating it settles first
  const int64_t bs = block_size();
  size_t bad = passed.size();
  for (size_t j = 0; j < passed.size(); ++j) {
    disk_->done(r->blocks()[j].file, passed[j] != 0);
    if (!passed[j] && bad == passed.size()) bad = j;
  }
  // Blocks before the first bad one are indexed as if computed here; from it
  // on the sequence evaluates its positions again (later blocks passed, but
  // the step that read them read the bad one too).
  for (size_t j = 0; j < bad; ++j) {
    const size_t i = static_cast<size_t>(restore_first_) + j;
    index_block(s, i, std::span<const int32_t>(s.tokens).subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)));
  }
  if (bad == passed.size()) return;
  const int64_t i = restore_first_ + static_cast<int64_t>(bad);
  // The partly used last block loaded at once (keyed) stays keyed: its file
  // passed, and its K/V are those of this prefix.
  if (static_cast<int64_t>(s.keys.size()) > i) s.keys.resize(static_cast<size_t>(i));
  if (static_cast<int64_t>(s.digests.size()) > i) s.digests.resize(static_cast<size_t>(i));
  s.stale_from = s.stale_from < 0 ? i * bs : std::min(s.stale_from, i * bs);
}

void KvCache::index_block(const KvSequence& s, size_t i, std::span<const int32_t> tokens) {
  const int32_t parent = i == 0 ? -1 : s.blocks[i - 1];
  // false: another block has the key (a collision, or the same prefix); this one stays unindexed
  index_->insert(s.blocks[i], s.keys[i], tokens, parent, parent < 0 ? 0 : alloc_.version(parent));
}

int64_t KvCache::settle(SeqId seq) {
  if (restore_ && restore_seq_ == seq) settle_restore();
  return std::exchange(seqs_.get(seq).stale_from, -1);
}

std::span<const int32_t> KvCache::tokens(SeqId seq, int64_t from, int64_t to) const {
  const KvSequence& s = seqs_.get(seq);
  if (!s.keyable || from < 0 || from > to || to > static_cast<int64_t>(s.tokens.size()))
    fail("sequence {} does not know the tokens of positions [{}, {})", seq.index, from, to);
  return std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(from), static_cast<size_t>(to - from));
}

void KvCache::check_readable(SeqId seq, int64_t pos) const {
  if (restore_ && restore_seq_ == seq)
    fail("sequence {} is still being read from the disk tier: read its K/V after its first step", seq.index);
  const int64_t stale = seqs_.get(seq).stale_from;
  if (stale >= 0 && pos >= stale)
    fail("position {} of sequence {} failed its disk check and is evaluated again by its next step", pos, seq.index);
}

KvCache::SeqId KvCache::fork(SeqId src) {
  settle_if(src);
  if (seqs_.get(src).stale_from >= 0)  // also refuses a freed or unknown id before an entry is taken
    fail("sequence {} has positions to evaluate again; fork it after its next step", src.index);
  const SeqId id = new_sequence(seqs_.get(src).max_len);
  KvSequence& s = seqs_.get(id);
  const KvSequence& from = seqs_.get(src);
  s.blocks = from.blocks;
  s.length = from.length;
  s.tokens = from.tokens;
  s.keyable = from.keyable;
  s.keys = from.keys;
  s.digests = from.digests;
  for (int32_t b : s.blocks) alloc_.retain(b);
  sync_window(s);
  hold_window(s);
  return id;
}

KvCache::SeqId KvCache::fork_copy(SeqId src) {
  settle_if(src);
  if (seqs_.get(src).stale_from >= 0)
    fail("sequence {} has positions to evaluate again; copy it after its next step", src.index);
  const int64_t n = static_cast<int64_t>(seqs_.get(src).blocks.size());
  if (n > alloc_.available_blocks())
    fail("KV cache out of blocks: a copy of {} blocks, {} of {} available", n, alloc_.available_blocks(),
         alloc_.total_blocks());
  if (windowed()) {
    int64_t slots = 0;
    for (int32_t b : seqs_.get(src).blocks) slots += slots_.slot(b) >= 0;
    if (!reserve_window_slots(slots))
      fail("KV cache out of window slots: a copy of {} window blocks, {} of {} free", slots, slots_.free_slots(),
           slots_.total_slots());
  }
  const SeqId id = new_sequence(seqs_.get(src).max_len);
  KvSequence& s = seqs_.get(id);
  const KvSequence& from = seqs_.get(src);
  for (int32_t b : from.blocks) s.blocks.push_back(copy_of(b));
  sync_window(s);
  s.length = from.length;
  s.tokens = from.tokens;
  s.keyable = from.keyable;
  s.keys = from.keys;  // the copies stay unkeyed; the keys chain on for later blocks
  s.digests = from.digests;
  hold_window(s);
  return id;
}

void KvCache::free_sequence(SeqId seq) {
  settle_if(seq);  // the blocks that passed stay cached
  KvSequence& s = seqs_.get(seq);
  release_window(s);
  // Last block first: a cached prefix loses its tail before its head.
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) release_block(*b);
  seqs_.free(seq);
}

// --- Blocks: the allocator and the prefix index together ---

int32_t KvCache::fresh_block(bool with_slot) {
  // No free block: the least recently used cached one is given up.
  if (alloc_.free_blocks() == 0 && index_)
    if (const auto evicted = index_->evict()) alloc_.discard(*evicted);
  const auto b = alloc_.allocate();
  if (!b) fail("KV cache out of blocks ({} in the pool)", alloc_.total_blocks());
  if (!windowed()) return *b;
  // An evicted cached block may bring its old slot along.
  if (with_slot) {
    give_slot(*b);
  } else {
    slots_.release(*b);
  }
  return *b;
}

void KvCache::release_block(int32_t block) {
  const bool keep = indexed(block);
  alloc_.release(block, keep);
  if (alloc_.owners(block) > 0) return;
  if (keep) {
    index_->park(block);
  } else if (windowed()) {
    slots_.release(block);
  }
}

void KvCache::take_block(int32_t block) {
  if (alloc_.kept(block)) index_->unpark(block);
  alloc_.take(block);
}

void KvCache::unindex(int32_t block) {
  if (indexed(block)) index_->erase(block);
}

int32_t KvCache::copy_of(int32_t block) {
  const bool slot = windowed() && slots_.slot(block) >= 0;
  const int32_t fresh = fresh_block(slot);
  copied_bytes_ += storage_.copy_block(fresh, block);
  if (slot) copied_bytes_ += storage_.copy_window_block(slots_.slot(fresh), slots_.slot(block));
  ++copied_blocks_;
  return fresh;
}

// --- Window slots ---

void KvCache::give_slot(int32_t block) {
  if (!slots_.allocate(block)) fail("KV cache out of window slots ({} in the pool)", slots_.total_slots());
}

int64_t KvCache::window_first_block(int64_t length) const {
  return std::max<int64_t>(0, length + 1 - window_) / block_size();
}

bool KvCache::window_held(const std::vector<int32_t>& blocks, int64_t first, int64_t end) const {
  for (int64_t i = first; i < end; ++i)
    if (slots_.slot(blocks[static_cast<size_t>(i)]) < 0) return false;
  return true;
}

bool KvCache::reserve_window_slots(int64_t n) {
  if (slots_.free_slots() < n) take_back_window_slots();
  return slots_.free_slots() >= n;
}

void KvCache::take_back_window_slots() {
  slots_.reclaim();
  seqs_.each([&](KvSequence& s) { sync_window(s); });
}

void KvCache::hold_window(KvSequence& s) {
  if (!windowed()) return;
  s.held_end = static_cast<int64_t>(s.blocks.size());
  s.held_first = std::min(window_first_block(s.length), s.held_end);
  for (int64_t i = s.held_first; i < s.held_end; ++i) slots_.hold(s.blocks[static_cast<size_t>(i)]);
}

void KvCache::release_window(KvSequence& s) {
  for (int64_t i = s.held_first; i < s.held_end; ++i) slots_.unhold(s.blocks[static_cast<size_t>(i)]);
  s.held_first = s.held_end = 0;
}

void KvCache::sync_window(KvSequence& s) {
  if (!windowed()) return;
  s.window_blocks.resize(s.blocks.size());
  for (size_t i = 0; i < s.blocks.size(); ++i) s.window_blocks[i] = slots_.slot(s.blocks[i]);
}

int64_t KvCache::available_blocks() const {
  if (!windowed()) return alloc_.available_blocks();
  return std::min(alloc_.available_blocks(), slots_.available_slots());
}

// --- Writes ---

int64_t KvCache::blocks_needed(SeqId seq, int64_t to) const {
  const KvSequence& s = seqs_.get(seq);
  const int64_t bs = block_size();
  int64_t need = std::max<int64_t>(0, (to + bs - 1) / bs - static_cast<int64_t>(s.blocks.size()));
  const bool partial_last = s.length % bs != 0 && !s.blocks.empty();
  if (to > s.length && partial_last && (alloc_.owners(s.blocks.back()) > 1 || indexed(s.blocks.back()))) ++need;
  return need;
}

void KvCache::reserve(KvSequence& s, SeqId seq, int64_t start, int64_t n) {
  if (start != s.length)
    fail("broken continuity: write at position {} but sequence {} holds positions [0, {}); "
         "the next write must start at {}",
         start, seq.index, s.length, s.length);
  if (n < 0) fail("cannot write {} positions", n);
  if (start + n > s.max_len) {
    if (s.max_len == n_ctx_)
      fail("context full: sequence {} has {} positions and {} more exceed the context size {}", seq.index, start, n,
           n_ctx_);
    fail("sequence {} is full: {} positions and {} more exceed its maximum of {}", seq.index, start, n, s.max_len);
  }
  const int64_t need = blocks_needed(seq, start + n);
  if (need > alloc_.available_blocks())
    fail("KV cache out of blocks: {} positions requested, {} more blocks needed and {} of {} x {} positions free",
         start + n, need, alloc_.available_blocks(), alloc_.total_blocks(), block_size());
  // Every block this write touches is in the window range of one of its queries: each needs a slot.
  if (windowed() && !reserve_window_slots(need))
    fail("KV cache out of window slots: sequence {} needs {} more for positions [{}, {}) and {} of {} are free "
         "(the window pool holds a window and a step for each of the sequences it was sized for)",
         seq.index, need, start, start + n, slots_.free_slots(), slots_.total_slots());
  const int64_t bs = block_size();
  release_window(s);
  // The partly filled last block: shared (fork) or keyed, it is copied before this sequence writes into it.
  if (n > 0 && start % bs != 0) {
    const int32_t last = s.blocks.back();
    if (alloc_.owners(last) > 1 || indexed(last)) {
      s.blocks.back() = copy_of(last);
      release_block(last);
    }
  }
  while (static_cast<int64_t>(s.blocks.size()) * bs < start + n) s.blocks.push_back(fresh_block(true));
  s.length = start + n;
  sync_window(s);
  hold_window(s);
}

void KvCache::begin_write(SeqId seq, int64_t start, std::span<const int32_t> tokens) {
  KvSequence& s = seqs_.get(seq);
  reserve(s, seq, start, static_cast<int64_t>(tokens.size()));
  if (s.keyable) s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
}

void KvCache::begin_write(SeqId seq, int64_t start, int64_t n) {
  KvSequence& s = seqs_.get(seq);
  reserve(s, seq, start, n);
  if (n > 0) {
    s.keyable = false;
    s.tokens.clear();
  }
}

void KvCache::end_write(SeqId seq, int64_t keyed_until) {
  KvSequence& s = seqs_.get(seq);
  if (!index_ || !s.keyable) return;
  const int64_t bs = block_size(), full = std::min(s.length, keyed_until) / bs;
  for (int64_t i = static_cast<int64_t>(s.keys.size()); i < full; ++i) {
    const auto tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    s.keys.push_back(PrefixIndex::chain(i == 0 ? PrefixIndex::kRootKey : s.keys.back(), tokens));
    if (index_->indexed(s.blocks[static_cast<size_t>(i)])) continue;  // taken from the cache
    index_block(s, static_cast<size_t>(i), tokens);
  }
  if (!disk_) return;
  const size_t named = s.digests.size();
  name_blocks(s);
  for (size_t i = named; i < s.digests.size(); ++i) write_block(s.blocks[i], s, static_cast<int64_t>(i));
}

int64_t KvCache::resume_point(SeqId seq, int64_t n) const {
  const KvSequence& s = seqs_.get(seq);
  if (n < 0 || n > s.length) fail("no position {} in sequence {} of {} positions", n, seq.index, s.length);
  if (!windowed()) return n;
  const int64_t bs = block_size();
  int64_t m = n;
  while (m > 0) {
    int64_t missing = -1;
    for (int64_t i = (m + bs - 1) / bs - 1; i >= window_first_block(m) && missing < 0; --i)
      if (slots_.slot(s.blocks[static_cast<size_t>(i)]) < 0) missing = i;
    if (missing < 0) break;
    m = missing * bs;  // the positions before the block whose slot is gone
  }
  return m;
}

void KvCache::trim_window(SeqId seq) {
  KvSequence& s = seqs_.get(seq);
  if (!windowed()) return;
  for (int64_t i = 0; i < window_first_block(s.length); ++i) {
    const int32_t b = s.blocks[static_cast<size_t>(i)];
    if (alloc_.owners(b) == 1 && !indexed(b)) slots_.release(b);
  }
  sync_window(s);
}

bool KvCache::holds(int64_t layer, SeqId seq, int64_t pos) const {
  const KvSequence& s = seqs_.get(seq);
  if (pos < 0 || pos >= s.length) return false;
  return !storage_.window_layer(layer) || slots_.slot(s.blocks[static_cast<size_t>(pos / block_size())]) >= 0;
}

void KvCache::truncate(SeqId seq, int64_t n) {
  settle_if(seq);
  KvSequence& s = seqs_.get(seq);
  if (n < 0 || n > s.length) fail("cannot truncate sequence {} of {} positions to {}", seq.index, s.length, n);
  if (const int64_t m = resume_point(seq, n); m != n)
    fail("cannot truncate sequence {} to {} positions: its sliding-window layers no longer hold the {} before "
         "them (it can go back to {})",
         seq.index, n, window_ - 1, m);
  const int64_t bs = block_size();
  const int64_t keep = (n + bs - 1) / bs;
  release_window(s);
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
  if (s.stale_from >= n) s.stale_from = -1;
  if (s.keyable) s.tokens.resize(static_cast<size_t>(n));
  if (static_cast<int64_t>(s.keys.size()) > n / bs) s.keys.resize(static_cast<size_t>(n / bs));
  if (static_cast<int64_t>(s.digests.size()) > n / bs) s.digests.resize(static_cast<size_t>(n / bs));
  // A keyed block now partly past the length will be written again: only its
  // sole owner may forget the key (shared, it is copied on the next write).
  if (n % bs != 0 && indexed(s.blocks.back()) && alloc_.owners(s.blocks.back()) == 1) unindex(s.blocks.back());
  sync_window(s);
  hold_window(s);
}

// --- Reads and writes of K/V ---

KvCache::Row KvCache::locate(int64_t layer, SeqId seq, int64_t pos, const char* what) const {
  const KvSequence& s = seqs_.get(seq);
  if (pos < 0 || pos >= s.length) fail("{} at position {} outside [0, {})", what, pos, s.length);
  const int64_t bs = storage_.block_size();
  if (layer < 0 || layer >= storage_.shape().n_layer) fail("{} in layer {} of {}", what, layer, storage_.shape().n_layer);
  const int32_t b = s.blocks[static_cast<size_t>(pos / bs)];
  const int64_t block = storage_.window_layer(layer) ? slots_.slot(b) : b;
  if (block < 0)
    fail("{} at position {} of sliding-window layer {}: the window moved past it and its slot was taken back", what,
         pos, layer);
  return {block, pos % bs};
}

void KvCache::store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v) {
  const Row r = locate(layer, seq, pos, "store");
  storage_.store(layer, r.block, r.row, k, v);
}

void KvCache::load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const {
  check_readable(seq, pos);
  const Row r = locate(layer, seq, pos, "load");
  storage_.load(layer, r.block, r.row, k, v);
}

void KvCache::store_raw(int64_t layer, SeqId seq, int64_t pos, const uint8_t* k, const uint8_t* v) {
  settle_if(seq);
  const Row r = locate(layer, seq, pos, "store");
  storage_.store_raw(layer, r.block, r.row, k, v);
}

void KvCache::load_raw(int64_t layer, SeqId seq, int64_t pos, uint8_t* k, uint8_t* v) const {
  check_readable(seq, pos);
  const Row r = locate(layer, seq, pos, "load");
  storage_.load_raw(layer, r.block, r.row, k, v);
}

KvLayerView KvCache::view(int64_t layer, SeqId seq) const {
  const KvSequence& s = seqs_.get(seq);
  if (restore_ && restore_seq_ == seq) restore_->wait_layer(layer);
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
  st.evictions = index_ ? index_->evictions() : 0;
  st.copied_blocks = copied_blocks_;
  st.copied_bytes = copied_bytes_;
  st.blocks_free = alloc_.free_blocks();
  st.blocks_cached = alloc_.kept_blocks();
  st.blocks_used = alloc_.used_blocks();
  st.window_slots = slots_.total_slots();
  st.window_slots_used = slots_.used_slots();
  st.disk_hit_tokens = disk_hit_tokens_;
  if (disk_) st.disk = disk_->stats();
  return st;
}

}  // namespace tally
