#include "sizing/kv_plan.h"

#include <algorithm>
#include <cctype>

#include "core/byte_size.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"
#include "kv/kv_cache.h"
#include "kv/run_options.h"

namespace tally {
namespace {

uint64_t mul_or_fail(uint64_t a, uint64_t b, std::string_view what) {
  auto r = checked_mul(a, b);
  if (!r) fail("{} overflows 64 bits ({} x {})", what, a, b);
  return *r;
}

}  // namespace

DType kv_plan_dtype(std::string_view name) {
  const auto t = dtype_from_name(name);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::BF16 && *t != DType::Q8_0 && *t != DType::Q4_0))
    fail("--dtype '{}' is not a cache number format; use f32, f16, bf16, q8_0 or q4_0", excerpt(name));
  return *t;
}

std::vector<uint64_t> parse_token_list(std::string_view list) {
  std::vector<uint64_t> out;
  if (trim(list).empty()) fail("--tokens is empty; give context lengths such as 512,4096,32768");
  size_t start = 0;
  for (size_t i = 1;; ++i) {
    const size_t comma = list.find(',', start);
    const std::string_view entry = trim(list.substr(start, comma == std::string_view::npos ? list.npos : comma - start));
    if (entry.empty()) fail("--tokens '{}': entry {} is empty", excerpt(list), i);
    const uint64_t v = parse_token_count(entry, fmt::format("--tokens '{}': entry {}", excerpt(list), i));
    if (v == 0) fail("--tokens '{}': entry {} is zero; a context holds at least one token", excerpt(list), i);
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

struct Mix {
  const char* name;
  double bits;
};
// llama.cpp's Q4_K_M mix (most matrices Q4_K, some Q6_K, norms F32), at the
// bits per weight of qwen2.5-coder:1.5b's file: 1,111,370,240 bytes for
// 1,777,088,000 weights, 5.003 bits (scripts/fixtures/weight_mix_bits.py).
// Smaller models keep more in wider formats (qwen2.5-coder:0.5b's file:
// 6.16 bits; gemma3:270m's: 7.36), so this is an estimate for models of a
// billion weights and more.
constexpr Mix kMixes[] = {{"q4_k_m", 5.0}};
constexpr DType kBlockFormats[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q6_K, DType::Q5_K,
                                   DType::Q5_1, DType::Q5_0, DType::Q4_K, DType::Q4_1, DType::Q4_0};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<WeightFormat> weight_format(std::string_view name) {
  const std::string n = lower(name);
  for (DType t : kBlockFormats)
    if (lower(dtype_name(t)) == n) {
      const auto& tr = traits(t);
      return WeightFormat{n, 8.0 * tr.type_size / tr.block_size, false};
    }
  for (const Mix& m : kMixes)
    if (n == m.name) return WeightFormat{n, m.bits, true};
  return std::nullopt;
}

std::string weight_format_names() {
  std::string s;
  for (DType t : kBlockFormats) s += (s.empty() ? "" : ", ") + lower(dtype_name(t));
  for (const Mix& m : kMixes) s += std::string(", ") + m.name;
  return s;
}

uint64_t kv_cache_bytes(uint64_t bytes_per_token, uint64_t tokens, uint64_t batch) {
  auto per_seq = checked_mul(bytes_per_token, tokens);
  auto all = per_seq ? checked_mul(*per_seq, batch) : std::nullopt;
  if (!all)
    fail("a cache of {} tokens x {} bytes per token x batch {} overflows 64 bits", tokens, bytes_per_token, batch);
  return *all;
}

uint64_t kv_crossover_tokens(uint64_t weights_bytes, uint64_t bytes_per_token, uint64_t batch) {
  if (bytes_per_token == 0 || batch == 0) fail("crossover needs positive bytes per token and batch");
  const uint64_t step = mul_or_fail(bytes_per_token, batch, "cache bytes per decode step");
  return weights_bytes / step + (weights_bytes % step != 0 ? 1 : 0);
}

uint64_t kv_max_tokens(uint64_t budget_bytes, uint64_t weights_bytes, uint64_t bytes_per_token, uint64_t batch) {
  if (bytes_per_token == 0 || batch == 0) fail("budget planning needs positive bytes per token and batch");
  if (budget_bytes < weights_bytes)
    fail("--budget {} is smaller than the weights alone ({}); no cache fits", format_bytes(budget_bytes),
         format_bytes(weights_bytes));
  const uint64_t step = mul_or_fail(bytes_per_token, batch, "cache bytes per position");
  return (budget_bytes - weights_bytes) / step;
}

const char* attention_kind(int64_t n_head, int64_t n_kv_head) {
  if (n_kv_head == n_head) return "MHA";
  if (n_kv_head == 1) return "MQA";
  return "GQA";
}

namespace {

// A cache whose window layers hold at most `window` positions: below the
// window every layer grows by `full` bytes per position, past it only the
// global layers, by `global` bytes (0 when every layer is windowed).
struct WindowedCache {
  uint64_t full = 0, global = 0, window = 0;

  uint64_t bytes(uint64_t tokens) const {
    if (tokens <= window) return mul_or_fail(full, tokens, "the cache's bytes");
    return add_or_fail(mul_or_fail(full, window, "the cache's bytes"),
                       mul_or_fail(global, tokens - window, "the cache's bytes"), "the cache's bytes");
  }
  // The smallest context whose cache reaches `weights` bytes; none when it never does.
  std::optional<uint64_t> crossover(uint64_t weights) const {
    const uint64_t at_window = mul_or_fail(full, window, "the cache's bytes");
    if (weights <= at_window) return weights / full + (weights % full != 0 ? 1 : 0);
    if (global == 0) return std::nullopt;
    const uint64_t rest = weights - at_window;
    return window + rest / global + (rest % global != 0 ? 1 : 0);
  }
  // The longest context whose cache fits in `room` bytes (kUnbounded: all of them).
  uint64_t max_tokens(uint64_t room) const {
    const uint64_t at_window = mul_or_fail(full, window, "the cache's bytes");
    if (room < at_window) return room / full;
    if (global == 0) return kUnbounded;
    return window + (room - at_window) / global;
  }

  static uint64_t add_or_fail(uint64_t a, uint64_t b, std::string_view what) {
    auto r = checked_add(a, b);
    if (!r) fail("{} overflow 64 bits ({} + {})", what, a, b);
    return *r;
  }
};

// The pool `tally run -c ctx` builds (kv/run_options.h: the default blocks
// and batch, one sequence).
std::optional<uint64_t> run_allocation(const KvShape& shape, const KvPlanRequest& r, uint64_t ctx) {
  if (ctx > static_cast<uint64_t>(kMaxContextTokens)) return std::nullopt;
  std::vector<bool> window_layers(static_cast<size_t>(shape.n_layer), false);
  std::fill_n(window_layers.begin(), r.n_window_layers, true);  // which ones does not change the bytes
  return kv_cache_planned_bytes(
      shape, run_cache_options(static_cast<int64_t>(ctx), r.type, static_cast<int64_t>(r.window), window_layers));
}

}  // namespace

std::vector<KvLayoutPlan> plan_kv(const KvPlanRequest& r) {
  const KvShape& s = r.shape;
  if (s.n_layer <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0 || r.n_head <= 0)
    fail("cache shape must be positive (layers {}, heads {}, kv heads {}, head_dim {})", s.n_layer, r.n_head,
         s.n_kv_head, s.head_dim);
  if (r.n_head % s.n_kv_head != 0)
    fail("{} query heads are not divisible into {} kv heads", r.n_head, s.n_kv_head);
  if (r.batch == 0) fail("--batch must be at least 1");
  if (r.contexts.empty()) fail("no context lengths to size");
  if (r.n_window_layers < 0 || r.n_window_layers > s.n_layer || (r.n_window_layers > 0) != (r.window > 0))
    fail("a sliding window of {} positions on {} of {} layers is not a layout", r.window, r.n_window_layers,
         s.n_layer);

  std::vector<KvLayoutPlan> out;
  const std::pair<const char*, int64_t> layouts[] = {{"model", s.n_kv_head}, {"mha", r.n_head}, {"mqa", 1}};
  for (const auto& [name, kv] : layouts) {
    KvLayoutPlan p;
    p.name = name;
    p.n_kv_head = kv;
    p.bytes_per_token = kv_bytes_per_token({s.n_layer, kv, s.head_dim}, r.type);
    if (r.window == 0) {
      for (uint64_t ctx : r.contexts) p.context_bytes.push_back(kv_cache_bytes(p.bytes_per_token, ctx, r.batch));
      if (r.weights_bytes) p.crossover_tokens = kv_crossover_tokens(*r.weights_bytes, p.bytes_per_token, r.batch);
      if (r.budget_bytes)
        p.max_tokens = kv_max_tokens(*r.budget_bytes, r.weights_bytes.value_or(0), p.bytes_per_token, r.batch);
    } else {
      const int64_t n_global = s.n_layer - r.n_window_layers;
      const uint64_t global_per_token = n_global > 0 ? kv_bytes_per_token({n_global, kv, s.head_dim}, r.type) : 0;
      p.bytes_per_token_past_window = global_per_token;
      const WindowedCache c{mul_or_fail(p.bytes_per_token, r.batch, "cache bytes per position"),
                            mul_or_fail(global_per_token, r.batch, "cache bytes per position"), r.window};
      for (uint64_t ctx : r.contexts) p.context_bytes.push_back(c.bytes(ctx));
      if (r.batch == 1)
        for (uint64_t ctx : r.contexts) p.allocated_bytes.push_back(run_allocation({s.n_layer, kv, s.head_dim}, r, ctx));
      if (r.weights_bytes) p.crossover_tokens = c.crossover(*r.weights_bytes);
      if (r.budget_bytes) {
        const uint64_t weights = r.weights_bytes.value_or(0);
        if (*r.budget_bytes < weights)
          fail("--budget {} is smaller than the weights alone ({}); no cache fits", format_bytes(*r.budget_bytes),
               format_bytes(weights));
        p.max_tokens = c.max_tokens(*r.budget_bytes - weights);
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tally
