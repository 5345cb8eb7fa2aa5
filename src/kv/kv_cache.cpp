#include "kv/kv_cache.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "kernels/ops.h"

namespace tally {

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
}

namespace {
int64_t blocks_for(int64_t n_ctx, int64_t block_size) {
  if (n_ctx <= 0) fail("context size must be positive, got {}", n_ctx);
  if (n_ctx > kMaxContextTokens) fail("context size {} is above the limit of {} tokens", n_ctx, kMaxContextTokens);
  if (block_size <= 0 || block_size > kMaxContextTokens)
    fail("KV block size must be from 1 to {}, got {}", kMaxContextTokens, block_size);
  return (n_ctx + block_size - 1) / block_size;
}
}  // namespace

KvCache::KvCache(const KvShape& shape, const KvCacheOptions& o)
    : storage_(shape, o.block_size, blocks_for(o.n_ctx, o.block_size), o.type,
               o.budget_bytes ? o.budget_bytes : available_memory_bytes()),
      alloc_(storage_.n_blocks()),
      n_ctx_(o.n_ctx) {}

const KvCache::Sequence& KvCache::get(SeqId seq) const {
  if (seq < 0 || seq >= static_cast<SeqId>(seqs_.size()) || !seqs_[seq].live)
    fail("KV cache has no sequence {}", seq);
  return seqs_[seq];
}
KvCache::Sequence& KvCache::get(SeqId seq) { return const_cast<Sequence&>(std::as_const(*this).get(seq)); }

KvCache::SeqId KvCache::create_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (!seqs_[i].live) {
      seqs_[i] = Sequence{true, {}, 0};
      return static_cast<SeqId>(i);
    }
  seqs_.push_back(Sequence{true, {}, 0});
  return static_cast<SeqId>(seqs_.size() - 1);
}

void KvCache::free_sequence(SeqId seq) {
  truncate(seq, 0);
  get(seq).live = false;
}

void KvCache::begin_write(SeqId seq, int64_t start, int64_t n) {
  Sequence& s = get(seq);
  if (start != s.length)
    fail("broken continuity: write at position {} but sequence {} holds positions [0, {}); "
         "the next write must start at {}",
         start, seq, s.length, s.length);
  if (n < 0) fail("cannot write {} positions", n);
  if (start + n > n_ctx_)
    fail("context full: sequence {} has {} positions and {} more exceed the context size {}", seq, start, n, n_ctx_);
  const int64_t bs = storage_.block_size();
  const int64_t need = (start + n + bs - 1) / bs;
  // A partially filled last block shared with another sequence is copied before writing.
  if (start % bs != 0 && !s.blocks.empty() && alloc_.owners(s.blocks.back()) > 1) {
    const auto fresh = alloc_.allocate();
    if (!fresh) fail("KV cache out of blocks ({} in the pool)", alloc_.total_blocks());
    storage_.copy_block(*fresh, s.blocks.back());
    alloc_.release(s.blocks.back());
    s.blocks.back() = *fresh;
  }
  const size_t had = s.blocks.size();
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    const auto id = alloc_.allocate();
    if (!id) {  // give back what this call took: a refused write changes nothing
      while (s.blocks.size() > had) {
        alloc_.release(s.blocks.back());
        s.blocks.pop_back();
      }
      fail("KV cache out of blocks: {} positions requested, pool of {} blocks x {} positions is in use", start + n,
           alloc_.total_blocks(), bs);
    }
    s.blocks.push_back(*id);
  }
  s.length = start + n;
}

void KvCache::truncate(SeqId seq, int64_t n) {
  Sequence& s = get(seq);
  if (n < 0 || n > s.length) fail("cannot truncate sequence {} of {} positions to {}", seq, s.length, n);
  const int64_t bs = storage_.block_size();
  const int64_t keep = (n + bs - 1) / bs;
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    alloc_.release(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
}

void KvCache::store_vec(uint8_t* dst, const float* src) const {
  const int64_t hd = storage_.shape().head_dim;
  if (storage_.type() == DType::F32) {
    std::memcpy(dst, src, hd * sizeof(float));
  } else {
    to_f16(src, reinterpret_cast<uint16_t*>(dst), hd);
  }
}

void KvCache::store(int64_t layer, SeqId seq, int64_t pos, const float* k, const float* v) {
  const Sequence& s = get(seq);
  if (pos < 0 || pos >= s.length) fail("store at position {} outside the reserved [0, {})", pos, s.length);
  const int64_t bs = storage_.block_size();
  const int64_t block = s.blocks[pos / bs], row = pos % bs;
  const auto& sh = storage_.shape();
  const uint64_t vb = storage_.value_bytes();
  for (int64_t h = 0; h < sh.n_kv_head; ++h) {
    const uint64_t off = (static_cast<uint64_t>(h) * bs + row) * sh.head_dim * vb;
    store_vec(storage_.k_block(layer, block) + off, k + h * sh.head_dim);
    store_vec(storage_.v_block(layer, block) + off, v + h * sh.head_dim);
  }
}

void KvCache::load(int64_t layer, SeqId seq, int64_t pos, float* k, float* v) const {
  const KvLayerView view_ = view(layer, seq);
  if (pos < 0 || pos >= view_.length) fail("load at position {} outside [0, {})", pos, view_.length);
  const int64_t hd = view_.head_dim;
  for (int64_t h = 0; h < view_.n_kv_head; ++h) {
    const int64_t bi = pos / view_.block_size, row = pos % view_.block_size;
    const uint64_t off = static_cast<uint64_t>(row) * view_.pos_stride * storage_.value_bytes();
    const uint8_t* ks = view_.k_head(bi, h) + off;
    const uint8_t* vs = view_.v_head(bi, h) + off;
    for (int64_t i = 0; i < hd; ++i) {
      if (view_.type == DType::F32) {
        std::memcpy(&k[h * hd + i], ks + 4 * i, 4);
        std::memcpy(&v[h * hd + i], vs + 4 * i, 4);
      } else {
        uint16_t a, b;
        std::memcpy(&a, ks + 2 * i, 2);
        std::memcpy(&b, vs + 2 * i, 2);
        k[h * hd + i] = f16_to_f32(a);
        v[h * hd + i] = f16_to_f32(b);
      }
    }
  }
}

KvLayerView KvCache::view(int64_t layer, SeqId seq) const {
  const Sequence& s = get(seq);
  KvLayerView v;
  v.k_layer = storage_.k_block(layer, 0);
  v.v_layer = storage_.v_block(layer, 0);
  v.block_bytes = storage_.block_bytes();
  v.blocks = s.blocks.data();
  v.length = s.length;
  v.block_size = storage_.block_size();
  v.n_kv_head = storage_.shape().n_kv_head;
  v.head_dim = storage_.shape().head_dim;
  v.head_stride = v.block_size * v.head_dim;
  v.pos_stride = v.head_dim;
  v.type = storage_.type();
  return v;
}

}  // namespace tally
