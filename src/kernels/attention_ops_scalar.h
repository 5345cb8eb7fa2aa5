#pragma once
// The scalar reference of the three primitives of one attention chunk
// (attention_chunk.h says what each computes). Included by the scalar
// translation unit and, as the fallback for shapes the SIMD kernels do not
// take, by the SIMD ones; internal linkage keeps the copies apart.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kernels/attention_runs.h"
#include "kernels/kv_format.h"
#include "kernels/kv_layer_view.h"

namespace tally {
namespace {

// A query head's 32-value block quantized to int8 for the integer dots
// against Q8_0 / Q4_0 keys: value ~= d * q; sum = sum of q (a Q4_0 key's
// offset of 8 costs 8 * sum, taken once per block instead of per value).
struct QueryBlock {
  float d;
  int32_t sum;
  int8_t q[32];
};

// Calls f.template operator()<N>(h0) for the query heads [h0, h0 + N) of a
// group of n: groups of 8, then the rest. The SIMD kernels are instantiated
// per group size up to 8 (their accumulators in registers); a head's result
// never depends on the heads beside it, so any group splits this way.
template <typename F>
inline void for_head_groups(int64_t n, F&& f) {
  int64_t h0 = 0;
  for (; h0 + 8 <= n; h0 += 8) f.template operator()<8>(h0);
  switch (n - h0) {
    case 1: f.template operator()<1>(h0); break;
    case 2: f.template operator()<2>(h0); break;
    case 3: f.template operator()<3>(h0); break;
    case 4: f.template operator()<4>(h0); break;
    case 5: f.template operator()<5>(h0); break;
    case 6: f.template operator()<6>(h0); break;
    case 7: f.template operator()<7>(h0); break;
    default: break;
  }
}

// The primitives of one chunk, per instruction set, each for one cache
// format Fmt (kv_format.h) known at compile time:
//   dots_block:   scores[h * stride + j] = (q_h . k_j) * scale for m keys `step` bytes apart
//                 (f32 / f16 keys); a key's score never depends on m or on the key's place among them.
//   exp_sum:      x[j] = exp(x[j] - max), returns the sum, writes the max.
//   weighted_sum: out_h = sum over positions p in [b, e) of w[h * stride + p - b] * v_p.
//   dots_block_q: dots_block for Q8_0 / Q4_0 keys and a quantized query
//                 (n / 32 QueryBlocks per head): per block an exact integer
//                 sum, then s = s + float(isum) * (d_k * d_q) block by block,
//                 so every level gives the same bits.
//   kRowLanes:    true when the level also has tokens_chunk_lanes, a whole
//                 chunk of attend_tokens with the rows in vector lanes, for
//                 the caches lanes_take<Fmt>(kv) accepts (attention_avx512.cpp).
// A level's kernels are installed only for the head sizes they take
// (kernel_table.h's HeadFit), so none of them tests the size.
struct ScalarOps {
  static constexpr bool kRowLanes = false;
  template <class Fmt>
  static void dots_block_q(const QueryBlock* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                           float scale, float* scores, int64_t stride) {
    const int64_t nb = n / kKvBlockValues;
    for (int64_t j = 0; j < m; ++j)
      for (int64_t h = 0; h < n_q; ++h) scores[h * stride + j] = dot_q<Fmt>(q + h * nb, k + j * step, nb) * scale;
  }
  template <class Fmt>
  static float dot_q(const QueryBlock* q, const uint8_t* k, int64_t nb) {
    float s = 0;
    for (int64_t b = 0; b < nb; ++b, k += Fmt::kBlockBytes) {
      uint16_t dh;
      std::memcpy(&dh, k, 2);
      const uint8_t* x = k + kKvScaleBytes;
      int32_t isum = 0;
      if constexpr (Fmt::kQ4) {
        for (int i = 0; i < 16; ++i) isum += q[b].q[i] * (x[i] & 15) + q[b].q[i + 16] * (x[i] >> 4);
        isum -= 8 * q[b].sum;
      } else {
        for (int i = 0; i < 32; ++i) isum += q[b].q[i] * static_cast<int8_t>(x[i]);
      }
      s = s + static_cast<float>(isum) * (f16_to_f32(dh) * q[b].d);
    }
    return s;
  }
  template <class Fmt>
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                         float scale, float* scores, int64_t stride) {
    for (int64_t j = 0; j < m; ++j)
      for (int64_t h = 0; h < n_q; ++h) scores[h * stride + j] = dot<Fmt>(q + h * n, k + j * step, n) * scale;
  }
  static float exp_sum(float* x, int64_t n, float* max_out) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
    *max_out = mx;
    if (!std::isfinite(mx)) {  // every score -inf (or a NaN): the chunk weighs nothing
      for (int64_t i = 0; i < n; ++i) x[i] = 0;
      return 0;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    return static_cast<float>(sum);
  }
  template <class Fmt>
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t b, int64_t e) {
    const int64_t hd = kv.head_dim;
    std::memset(out, 0, static_cast<size_t>(n_q * hd) * sizeof(float));
    for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();)
      for (int64_t j = 0; j < r.count; ++j)
        for (int64_t h = 0; h < n_q; ++h) axpy<Fmt>(out + h * hd, w[h * stride + r.pos - b + j], r.ptr + j * r.step, hd);
  }
  template <class Fmt>
  static float dot(const float* q, const uint8_t* k, int64_t n) {
    float s = 0;
    if constexpr (Fmt::kF32) {
      const float* kf = reinterpret_cast<const float*>(k);
      for (int64_t i = 0; i < n; ++i) s += q[i] * kf[i];
    } else {
      const uint16_t* kh = reinterpret_cast<const uint16_t*>(k);
      for (int64_t i = 0; i < n; ++i) s += q[i] * f16_to_f32(kh[i]);
    }
    return s;
  }
  template <class Fmt>
  static void axpy(float* out, float w, const uint8_t* v, int64_t n) {
    if constexpr (Fmt::kBlocks) {
      for (int64_t b = 0; b < n / kKvBlockValues; ++b, out += kKvBlockValues, v += Fmt::kBlockBytes) {
        uint16_t dh;
        std::memcpy(&dh, v, 2);
        const float c = w * f16_to_f32(dh);
        const uint8_t* x = v + kKvScaleBytes;
        if constexpr (Fmt::kQ4) {
          for (int i = 0; i < 16; ++i) {
            out[i] += c * static_cast<float>((x[i] & 15) - 8);
            out[i + 16] += c * static_cast<float>((x[i] >> 4) - 8);
          }
        } else {
          for (int i = 0; i < 32; ++i) out[i] += c * static_cast<float>(static_cast<int8_t>(x[i]));
        }
      }
    } else if constexpr (Fmt::kF32) {
      const float* vf = reinterpret_cast<const float*>(v);
      for (int64_t i = 0; i < n; ++i) out[i] += w * vf[i];
    } else {
      const uint16_t* vh = reinterpret_cast<const uint16_t*>(v);
      for (int64_t i = 0; i < n; ++i) out[i] += w * f16_to_f32(vh[i]);
    }
  }
};

}  // namespace
}  // namespace tally
