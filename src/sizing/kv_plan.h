#pragma once
// Planning a KV cache: its bytes per context for a model's head layout and
// the MHA/MQA variants of the same shape, the context at which the cache
// outweighs the weights, and the longest context a memory budget holds.
// Every product is overflow-checked; impossible requests throw tally::Error.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_shape.h"

namespace tally {

// The number formats a cache plan accepts: f32, f16, bf16, q8_0, q4_0
// (case-insensitive). Throws naming `name` and the accepted list otherwise.
DType kv_plan_dtype(std::string_view name);
// "512,4096,32768" or "512,4k,32K" -> {512, 4096, 32768}: every entry a
// positive number of tokens (core/byte_size.h: parse_token_count).
std::vector<uint64_t> parse_token_list(std::string_view list);

// How a model's weights are stored, for sizing them from a parameter count:
// bits per weight of GGUF's block formats (q8_0: 34 bytes per 32 weights =
// 8.5 bits), and llama.cpp's Q4_K_M mix at the bits per weight measured on a
// catalog file (an estimate: a mix keeps some matrices in other formats, in
// shares that differ by model).
struct WeightFormat {
  std::string name;
  double bits_per_weight = 0;
  bool estimate = false;
};
// Case-insensitive; nullopt for a name that is none of weight_format_names().
std::optional<WeightFormat> weight_format(std::string_view name);
// "f32, f16, bf16, q8_0, ...": the names weight_format() takes.
std::string weight_format_names();

// Bytes of the cache holding `tokens` positions for each of `batch` sequences.
uint64_t kv_cache_bytes(uint64_t bytes_per_token, uint64_t tokens, uint64_t batch);
// The context at which the K/V bytes one decode step reads (context x
// bytes_per_token x batch) reach the weight bytes it reads: the weights divided
// by bytes_per_token x batch, rounded up. Past it, decoding is dominated by the cache.
uint64_t kv_crossover_tokens(uint64_t weights_bytes, uint64_t bytes_per_token, uint64_t batch);
// The longest context whose cache fits beside the weights in `budget`:
// (budget - weights) / (bytes_per_token x batch), rounded down. Throws when
// the budget is smaller than the weights alone.
uint64_t kv_max_tokens(uint64_t budget_bytes, uint64_t weights_bytes, uint64_t bytes_per_token, uint64_t batch);

// One head layout of a model (its own, or the MHA / MQA variant of the same
// shape) with its sizes. Invariant: context_bytes[i] is for request.contexts[i].
struct KvLayoutPlan {
  std::string name;  // "model", "mha" or "mqa"
  int64_t n_kv_head = 0;
  uint64_t bytes_per_token = 0;  // all layers (up to the window, with a sliding window)
  // With a sliding window: past the window only the global layers grow.
  std::optional<uint64_t> bytes_per_token_past_window;
  std::vector<uint64_t> context_bytes;
  // With a sliding window and a batch of 1: what `tally run -c N` allocates
  // (blocks of 32; the window layers' pool holds the window, a --batch of 512
  // and two blocks), per context; nullopt past the largest context it takes.
  std::vector<std::optional<uint64_t>> allocated_bytes;
  std::optional<uint64_t> crossover_tokens;  // when the weights are known
  std::optional<uint64_t> max_tokens;        // when a budget is given; kUnbounded: any context fits
};
inline constexpr uint64_t kUnbounded = UINT64_MAX;

// What to size. Invariants checked by plan_kv: positive shape, n_head a
// multiple of shape.n_kv_head, batch >= 1, at least one context.
struct KvPlanRequest {
  KvShape shape;  // the model's own layout
  int64_t n_head = 0;  // query heads: the MHA variant has this many kv heads
  // Sliding window: n_window_layers of the layers hold at most `window`
  // positions (0 and 0: none). Invariant: n_window_layers <= layers.
  uint64_t window = 0;
  int64_t n_window_layers = 0;
  DType type = DType::F16;
  uint64_t batch = 1;
  std::vector<uint64_t> contexts{512, 4096, 32768};
  std::optional<uint64_t> weights_bytes;
  std::optional<uint64_t> budget_bytes;  // weights count as 0 when unknown
};

// "MHA", "MQA" or "GQA" for a layout with n_kv_head kv heads.
const char* attention_kind(int64_t n_head, int64_t n_kv_head);
// The model's layout, then the MHA (kv heads = heads) and MQA (kv heads = 1) variants.
std::vector<KvLayoutPlan> plan_kv(const KvPlanRequest& r);

}  // namespace tally
