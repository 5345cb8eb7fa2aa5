#pragma once
// Scaled dot-product attention of a GQA group of query heads over a sequence's
// cached keys and values, read block by block from the KV pool (no copy, no
// expansion of kv heads: the group's query heads read each key and value once).
//
// The keys are processed in fixed chunks of kAttentionChunk positions counted
// from position 0. A chunk gives, per head, its score maximum m, the sum l of
// exp(s - m) and the unnormalized output o = sum exp(s - m) v; merging the
// chunks in chunk order gives the result. Invariant: the result for a query
// depends only on the query, the keys and values and the visible count, never
// on which thread computed which chunk or how a prompt was split into batches
// (a score does not depend on which other keys the chunk holds either).
//
// Q8_0 / Q4_0 caches are read as stored: the query is rounded to int8 per
// 32-value block once per chunk, each key block's dot is an exact integer sum
// scaled by both blocks' scales, and each value block is summed with its
// scale folded into the softmax weight; nothing is dequantized into a buffer.
#include <cstdint>

#include "kernels/kv_layer_view.h"

namespace tally {

inline constexpr int64_t kAttentionChunk = 256;  // positions per chunk

inline int64_t attention_chunks(int64_t n_keys) { return (n_keys + kAttentionChunk - 1) / kAttentionChunk; }
// One chunk's result for n_q heads: n_q maxima, n_q sums, then n_q (head_dim) outputs.
inline int64_t attention_partial_floats(int64_t n_q, int64_t head_dim) { return n_q * (head_dim + 2); }
// Scores of one chunk for n_q heads.
inline int64_t attention_score_floats(int64_t n_q) { return n_q * kAttentionChunk; }
// What attend_group() needs as scratch for n_keys keys.
inline int64_t attention_scratch_floats(int64_t n_q, int64_t head_dim, int64_t n_keys) {
  return attention_score_floats(n_q) + attention_chunks(n_keys) * attention_partial_floats(n_q, head_dim);
}

// One kernel call's queries: the n_q query heads that share kv head
// `kv_head` (n_q head vectors back to back at q), and the score scale.
struct AttendArgs {
  const float* q = nullptr;
  int64_t n_q = 0;
  int64_t kv_head = 0;
  float scale = 1;
};

// Which keys a query reads. Keys [first, keys) are scored and those in
// [first, visible) weigh in: the causal pass has visible == keys, the dense
// "compute all scores, then mask" form of the lab keeps visible < keys, and a
// sliding window starts at first > 0 (keys below it are neither scored nor
// weighed). visible < 0 means keys.
// INVARIANT (of a resolved range): 0 <= first, visible <= keys <= kv.length.
struct KeyRange {
  int64_t keys = 0;
  int64_t visible = -1;
  int64_t first = 0;

  static KeyRange causal(int64_t n_keys) { return {n_keys, n_keys, 0}; }
  // visible clamped to [0, keys] and first to >= 0.
  KeyRange resolved() const;
};

// Chunk `chunk` of the attention of a.q: scores for the range's keys in
// [chunk * C, (chunk + 1) * C), weighed as the range says. scores:
// attention_score_floats(n_q) scratch. Writes `partial` and returns true, or
// returns false when the chunk holds no visible key.
// PRECONDITION: `range` is resolved.
bool attend_chunk(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, int64_t chunk, float* scores,
                  float* partial);

// out (n_q heads of head_dim) from the partials of chunks [0, n_chunks), back to back.
void attention_merge(const float* partials, int64_t n_chunks, int64_t n_q, int64_t head_dim, float* out);

// Queries of a causal prompt taken kAttentionTokens at a time (attend_tokens):
// the keys and values of a chunk are read, converted and multiplied once for
// all of them (16: SmolLM2's 3 heads per kv head make 48 rows, three full
// 16-lane blocks for the AVX-512 kernels, which put rows in vector lanes).
inline constexpr int64_t kAttentionTokens = 16;
// Rows rounded up to whole blocks of 16 (kernels that put rows in vector lanes).
inline int64_t attention_lane_rows(int64_t rows) { return (rows + 15) / 16 * 16; }
// What attend_tokens() needs as scratch for up to kAttentionTokens queries of
// n_q heads whose last sees n_keys keys.
inline int64_t attention_tokens_scratch_floats(int64_t n_q, int64_t head_dim, int64_t n_keys) {
  const int64_t rows = kAttentionTokens * n_q, lane_rows = attention_lane_rows(rows);
  return lane_rows * kAttentionChunk + (2 * lane_rows + rows + kAttentionChunk) * head_dim + 2 * rows +
         kAttentionTokens * attention_chunks(n_keys) * attention_partial_floats(n_q, head_dim);
}

// All chunks of one group, then the merge: out = softmax(q . K[first..visible) * scale) V,
// scoring keys [first, keys). A window skips the chunks wholly below it.
// scratch: attention_scratch_floats(n_q, head_dim, range.keys) floats.
// attend_chunk and attend_group run the kernels of the current level
// (kernel_table.h); kernels_at(SimdLevel::Scalar) has the reference.
void attend_group(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, float* scratch, float* out);

// n_tokens (1..kAttentionTokens) queries at consecutive positions of one
// causal sequence, for attend_tokens: query i's n_q heads are at
// a.q + i * q_stride, and its result goes to out + i * out_stride.
struct QueryRun {
  int64_t n_tokens = 1;
  int64_t q_stride = 0;
  int64_t out_stride = 0;
};

// attend_group for the queries of `run`: query i sees keys [0, n_keys + i).
// Each query's result is attend_group's, bit for bit: its scores and its sums
// run the same steps, and the keys past its last weigh exactly 0 in the value
// sums (the cache holds finite values). scratch:
// attention_tokens_scratch_floats(n_q, head_dim, n_keys + n_tokens - 1) floats.
void attend_tokens(const KvLayerView& kv, const AttendArgs& a, const QueryRun& run, int64_t n_keys, float* scratch,
                   float* out);
}  // namespace tally
