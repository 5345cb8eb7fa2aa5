#pragma once
// One attention chunk and one whole group over the cache, as templates over
// the primitives of an instruction set (Ops: ScalarOps, Avx2Ops, Avx512Ops;
// attention_ops_scalar.h says what each computes) and a cache format (Fmt:
// kv_format.h). Each translation unit instantiates them with its own flags
// (internal linkage) and install_attention puts them in its level's table.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/activation_q8.h"
#include "kernels/attention.h"
#include "kernels/attention_ops_scalar.h"
#include "kernels/attention_runs.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

// The n_q query heads (hd values each, hd % 32 == 0) as QueryBlocks: one
// quantization per chunk and head, shared by all the chunk's keys. The
// quantizer of every level gives the same bits (activation_q8.h). A block
// with a NaN gets a NaN scale: int8 has no NaN, and without it the head's
// scores would be finite garbage instead of the NaN an f16 cache gives (a
// head whose scores are all NaN weighs nothing, in every path).
inline void quantize_query(const float* q, int64_t n, QueryBlock* out) {
  BlockQ8 tmp[8];
  for (int64_t b0 = 0; b0 < n / 32; b0 += 8) {
    const int64_t nb = std::min<int64_t>(8, n / 32 - b0);
    quantize_row_q8(q + b0 * 32, tmp, nb * 32);
    for (int64_t b = 0; b < nb; ++b) {
      QueryBlock& o = out[b0 + b];
      const float* x = q + (b0 + b) * 32;
      const bool has_nan = std::any_of(x, x + 32, [](float v) { return std::isnan(v); });
      o.d = has_nan ? std::numeric_limits<float>::quiet_NaN() : tmp[b].d;
      o.sum = 0;
      for (int i = 0; i < 32; ++i) o.sum += (o.q[i] = tmp[b].q[i]);
    }
  }
}
// Query blocks on the stack up to this many (16 heads of 128); more take the heap.
inline constexpr int64_t kQueryBlocksOnStack = 64;

// The n query values as QueryBlocks (quantize_query): in `stack` when they
// fit (kQueryBlocksOnStack), else in `heap`.
inline QueryBlock* quantized_query(const float* q, int64_t n, QueryBlock* stack, std::vector<QueryBlock>& heap) {
  QueryBlock* out = stack;
  if (n / 32 > kQueryBlocksOnStack) {
    heap.resize(static_cast<size_t>(n / 32));
    out = heap.data();
  }
  quantize_query(q, n, out);
  return out;
}

// The keys of one run scored into scores[h * stride + p - b] (b: the chunk's
// first position) by Ops' dots for the format: float queries q, or their
// int8 blocks qb for Q8_0 / Q4_0.
template <typename Ops, typename Fmt>
inline void score_run(const float* q, const QueryBlock* qb, int64_t n_q, int64_t head_dim, const KvRuns& r, int64_t b,
                      float scale, float* scores, int64_t stride) {
  if constexpr (Fmt::kBlocks)
    Ops::template dots_block_q<Fmt>(qb, n_q, r.ptr, r.count, r.step, head_dim, scale, scores + (r.pos - b), stride);
  else
    Ops::template dots_block<Fmt>(q, n_q, r.ptr, r.count, r.step, head_dim, scale, scores + (r.pos - b), stride);
}

template <typename Ops, typename Fmt>
bool attend_chunk_impl(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, int64_t chunk,
                       float* scores, float* partial) {
  // Scores live at their key's place in the chunk (scores[h * C + p - b]) whether
  // or not a window cuts the chunk at `lo`.
  const int64_t g = a.kv_head, n_q = a.n_q, n_keys = range.keys;
  const int64_t b = chunk * kAttentionChunk, lo = std::max(b, range.first);
  const int64_t e_keys = std::min(b + kAttentionChunk, n_keys), e_vis = std::min(e_keys, range.visible);
  if (lo >= e_keys) return false;
  QueryBlock qb_stack[kQueryBlocksOnStack];
  std::vector<QueryBlock> qb_heap;
  const QueryBlock* qb = nullptr;
  if constexpr (Fmt::kBlocks) qb = quantized_query(a.q, n_q * kv.head_dim, qb_stack, qb_heap);
  // Past the cache's size the keys and values come from memory in one-block
  // runs: fetch keys kPrefetchAhead positions ahead of the dots, and this
  // run's values into L2 (the value kernels take them on into L1 just ahead).
  for (KvRuns r(kv, kv.k_layer, g, lo, e_keys); r.next();) {
    prefetch_positions<true>(kv, kv.k_layer, g, std::min(r.pos + kPrefetchAhead, n_keys),
                             std::min(r.pos + r.count + kPrefetchAhead, n_keys));
    prefetch_positions<false>(kv, kv.v_layer, g, r.pos, std::min(r.pos + r.count, range.visible));
    score_run<Ops, Fmt>(a.q, qb, n_q, kv.head_dim, r, b, a.scale, scores, kAttentionChunk);
  }
  // Masked keys (the dense form) were scored but weigh nothing: they never enter the softmax.
  if (e_vis <= lo) return false;
  float* mx = partial;
  float* sum = partial + n_q;
  float* w = scores + (lo - b);
  for (int64_t h = 0; h < n_q; ++h) sum[h] = Ops::exp_sum(w + h * kAttentionChunk, e_vis - lo, mx + h);
  // The next chunk's keys (usually the same thread's next task) into L2
  // while the values are summed, so that memory is not idle meanwhile.
  prefetch_positions<false>(kv, kv.k_layer, g, std::min(e_keys + kPrefetchAhead, n_keys),
                            std::min(e_keys + kAttentionChunk, n_keys));
  Ops::template weighted_sum<Fmt>(partial + 2 * n_q, n_q, w, kAttentionChunk, kv, g, lo, e_vis);
  return true;
}

template <typename Ops, typename Fmt>
void attend_group_impl(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, float* scratch, float* out) {
  const KeyRange r = range.resolved();
  float* scores = scratch;
  float* partials = scratch + attention_score_floats(a.n_q);
  const int64_t part = attention_partial_floats(a.n_q, kv.head_dim);
  int64_t used = 0;
  for (int64_t c = r.first / kAttentionChunk; c < attention_chunks(r.keys); ++c)
    used += attend_chunk_impl<Ops, Fmt>(kv, a, r, c, scores, partials + used * part);
  attention_merge(partials, used, a.n_q, kv.head_dim, out);
}

// The rows of n_tokens queries of n_q heads (query i at q + i * q_stride; row
// i * n_q + h) dimension-major in blocks of 16 rows: qt[(b * n + d) * 16 + r] =
// row 16b + r's value d, zero past the last row (what Ops::tokens_chunk_lanes takes).
inline void rows_in_lanes(const float* q, int64_t q_stride, int64_t n_tokens, int64_t n_q, int64_t n, float* qt) {
  const int64_t rows = n_tokens * n_q;
  std::fill_n(qt, attention_lane_rows(rows) * n, 0.0f);
  for (int64_t row = 0; row < rows; ++row) {
    const float* src = q + (row / n_q) * q_stride + (row % n_q) * n;
    for (int64_t d = 0; d < n; ++d) qt[((row / 16) * n + d) * 16 + row % 16] = src[d];
  }
}

// attend_group for up to kAttentionTokens causal queries at once
// (attention.h): per chunk, the scores of all their heads as rows (row
// i * n_q + h: query i's head h), a softmax per row over that query's keys,
// zero weights for the keys past them, and the value sums of all rows; then
// each query's chunks merged. The chunk's steps are one pass of dots_block
// and of weighted_sum over the rows, or, for Ops that have it and a cache
// they take, tokens_chunk_lanes (the rows in vector lanes).
template <typename Ops, typename Fmt>
void attend_tokens_impl(const KvLayerView& kv, const AttendArgs& a, const QueryRun& run, int64_t n_keys,
                        float* scratch, float* out) {
  constexpr int64_t C = kAttentionChunk;
  const float* q = a.q;
  const int64_t g = a.kv_head, n_q = a.n_q, n_tokens = run.n_tokens, q_stride = run.q_stride;
  const float scale = a.scale;
  const int64_t hd = kv.head_dim, rows = n_tokens * n_q, lane_rows = attention_lane_rows(rows);
  const int64_t last = n_keys + n_tokens - 1, n_chunks = attention_chunks(last), part = attention_partial_floats(n_q, hd);
  float* scores = scratch;              // (rows, C), or (C, lane_rows) with the rows in lanes
  float* qs = scores + lane_rows * C;   // (rows, hd): the queries back to back, or in lanes (rows_in_lanes)
  float* o = qs + lane_rows * hd;       // (rows, hd): one chunk's value sums
  float* work = o + rows * hd;          // (C + lane_rows, hd): the lanes kernel's values and sums
  float* mx = work + (C + lane_rows) * hd;  // per row: the chunk's maximum score
  float* sum = mx + rows;                   // and sum of exp(score - maximum)
  float* partials = sum + rows;             // (n_tokens, n_chunks, part)
  bool lanes = false;
  if constexpr (Ops::kRowLanes) lanes = Ops::template lanes_take<Fmt>(kv);
  if (lanes)
    rows_in_lanes(q, q_stride, n_tokens, n_q, hd, qs);
  else
    for (int64_t i = 0; i < n_tokens; ++i) std::copy_n(q + i * q_stride, n_q * hd, qs + i * n_q * hd);
  QueryBlock qb_stack[kQueryBlocksOnStack];
  std::vector<QueryBlock> qb_heap;  // the same bits as attend_chunk's per-chunk quantization
  const QueryBlock* qb = nullptr;
  if constexpr (Fmt::kBlocks) qb = quantized_query(qs, rows * hd, qb_stack, qb_heap);
  int64_t used[kAttentionTokens] = {}, seen[kAttentionTokens];
  // No software prefetch of keys and values here, unlike attend_chunk: a
  // prefill's tiles read the same ones over and over, from L2 or L3, and the
  // prefetch instructions cost more than they saved (at depth 2048 they were
  // 1.7% of the step, and the step 7% faster without them).
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t b = c * C, e = std::min(b + C, last);
    for (int64_t i = 0; i < n_tokens; ++i) seen[i] = std::clamp<int64_t>(n_keys + i - b, 0, e - b);
    if constexpr (Ops::kRowLanes)
      if (lanes)
        Ops::template tokens_chunk_lanes<Fmt>(qs, n_tokens, n_q, seen, kv, g, b, e, scale, scores, work, o, mx, sum);
    if (!lanes) {
      for (KvRuns r(kv, kv.k_layer, g, b, e); r.next();) score_run<Ops, Fmt>(qs, qb, rows, hd, r, b, scale, scores, C);
      for (int64_t row = 0; row < rows; ++row) {
        float* w = scores + row * C;
        const int64_t s = seen[row / n_q];
        if (s > 0) sum[row] = Ops::exp_sum(w, s, mx + row);
        std::fill(w + s, w + (e - b), 0.0f);
      }
      Ops::template weighted_sum<Fmt>(o, rows, scores, C, kv, g, b, e);
    }
    for (int64_t i = 0; i < n_tokens; ++i)
      if (seen[i] > 0) {
        float* p = partials + (i * n_chunks + used[i]) * part;
        std::copy_n(mx + i * n_q, n_q, p);
        std::copy_n(sum + i * n_q, n_q, p + n_q);
        std::copy_n(o + i * n_q * hd, n_q * hd, p + 2 * n_q);
        ++used[i];
      }
  }
  for (int64_t i = 0; i < n_tokens; ++i)
    attention_merge(partials + i * n_chunks * part, used[i], n_q, hd, out + i * run.out_stride);
}

// Ops' kernels for every cache format, as the table's entries for the head
// sizes from `fit` up (a level's kernels take those; the classes below keep
// the lower level's).
template <typename Ops>
void install_attention(KernelTable& t, HeadFit fit) {
  const auto put = [&]<typename Fmt>() {
    for (int f = static_cast<int>(fit); f < kHeadFits; ++f)
      t.attend[kv_format_index(Fmt::kType)][f] = {attend_chunk_impl<Ops, Fmt>, attend_group_impl<Ops, Fmt>,
                                                  attend_tokens_impl<Ops, Fmt>};
  };
  put.template operator()<KvF32>();
  put.template operator()<KvF16>();
  put.template operator()<KvQ8>();
  put.template operator()<KvQ4>();
}

}  // namespace
}  // namespace tally
