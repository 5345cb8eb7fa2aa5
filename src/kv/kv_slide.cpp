// A stream's slide (StreamingLLM's attention sinks): positions dropped from
// the middle of a sequence and the later ones moved down, their keys
// re-rotated by the caller. Kept apart from the cache's other work because it
// is the one operation that rewrites positions already stored.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace tally {

void KvCache::remove_positions(SeqId seq, int64_t from, int64_t n,
                               const std::function<void(int64_t, float*)>& fix_key) {
  settle_if(seq);
  KvSequence& s = seqs_.get(seq);
  if (from < 0 || n < 0 || from + n > s.length)
    fail("cannot remove positions [{}, {}) of sequence {} of {} positions", from, from + n, seq.index, s.length);
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
    auto has = [&](int64_t pos) { return slots_.slot(s.blocks[static_cast<size_t>(pos / bs)]) >= 0; };
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
             "window needs (fewer sink tokens or a larger window)",
             from + n, s.length, n);
    }
  }
  // Every block from `from` on is rewritten: it must be this sequence's alone and unkeyed.
  int64_t copies = 0;
  for (size_t i = first; i < s.blocks.size(); ++i) {
    copies += alloc_.owners(s.blocks[i]) > 1;
    slots += windowed() && alloc_.owners(s.blocks[i]) > 1 && slots_.slot(s.blocks[i]) >= 0;
  }
  if (copies > alloc_.available_blocks())
    fail("KV cache out of blocks: moving positions needs {} copies, {} blocks free", copies, alloc_.available_blocks());
  if (slots > slots_.free_slots())
    fail("KV cache out of window slots: moving positions needs {}, {} free", slots, slots_.free_slots());
  release_window(s);
  for (size_t i = first; i < s.blocks.size(); ++i) {
    const int32_t b = s.blocks[i];
    if (alloc_.owners(b) > 1) {
      s.blocks[i] = copy_of(b);
      release_block(b);
    } else {
      unindex(b);
    }
    if (windowed() && moved[i]) give_slot(s.blocks[i]);
  }
  hold_window(s);
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
      const Row to = locate(l, seq, p - n, "store");
      storage_.store_raw(l, to.block, to.row, nullptr, vr.data());  // V as it was stored
    }
  // A block that kept no moved positions holds stale ones: its slot goes.
  for (size_t d = first; windowed() && d < s.blocks.size(); ++d)
    if (!moved[d]) slots_.release(s.blocks[d]);
  sync_window(s);
  // The moved positions hold K/V computed with the dropped ones in view: no
  // cold run of their tokens computes them, so the sequence is keyed no
  // further (a later prompt of the same tokens, here or from the disk tier,
  // must not take them); its blocks before `from` keep their keys.
  s.keyable = false;
  s.tokens.clear();
  if (static_cast<int64_t>(s.keys.size()) > from / bs) s.keys.resize(static_cast<size_t>(from / bs));
  if (static_cast<int64_t>(s.digests.size()) > from / bs) s.digests.resize(static_cast<size_t>(from / bs));
  truncate(seq, len);
}

}  // namespace tally
