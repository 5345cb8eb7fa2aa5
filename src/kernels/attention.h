#pragma once
// Scaled dot-product attention of one query head over a sequence's cached keys
// and values, read block by block from the KV pool (no copy, no expansion of
// kv heads: a GQA group of query heads reads the same kv head).
#include <cstdint>

#include "kv/kv_layer_view.h"

namespace tally {

// out (head_dim) = softmax(q . K[0..n_keys) * scale) V, reading kv head `kv_head`.
// Keys at [n_visible, n_keys) are computed and then masked (-inf): the dense
// "compute all scores, then mask" form, for experiments; n_visible < 0 means n_keys.
// scores: scratch of at least n_keys floats. PRECONDITION: n_keys <= kv.length.
void attend(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale, float* scores,
            float* out, int64_t n_visible = -1);
void attend_scalar(const float* q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                   float* scores, float* out, int64_t n_visible = -1);

// The same for the n_q query heads that share kv head `kv_head` (a GQA group),
// reading each key and value once for all of them. q and out hold n_q head
// vectors back to back; scores: scratch of n_q * n_keys floats. Each head's
// result is bit-identical to attend() on that head alone.
void attend_group(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                  float* scores, float* out, int64_t n_visible = -1);

}  // namespace tally
