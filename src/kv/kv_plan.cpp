#include "kv/kv_plan.h"

#include <fmt/format.h>

#include <charconv>

#include "core/checked_math.h"
#include "core/error.h"

namespace tally {
namespace {

uint64_t mul_or_fail(uint64_t a, uint64_t b, std::string_view what) {
  auto r = checked_mul(a, b);
  if (!r) fail("{} overflows 64 bits ({} x {})", what, a, b);
  return *r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whole decimal number, or nullopt (empty, sign, other characters, overflow).
std::optional<uint64_t> parse_whole(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

double kv_bytes_per_value(DType type) {
  const auto& t = traits(type);
  return static_cast<double>(t.type_size) / t.block_size;
}

uint64_t kv_bytes_per_token(const KvShape& s, DType type) {
  if (s.n_layer <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0)
    fail("cache shape must be positive (layers {}, kv heads {}, head_dim {})", s.n_layer, s.n_kv_head, s.head_dim);
  const auto& t = traits(type);
  const uint64_t blocks_per_vec = (static_cast<uint64_t>(s.head_dim) + t.block_size - 1) / t.block_size;
  uint64_t b = mul_or_fail(2ull * static_cast<uint64_t>(s.n_layer), static_cast<uint64_t>(s.n_kv_head),
                           "cache bytes per token");
  b = mul_or_fail(b, blocks_per_vec, "cache bytes per token");
  return mul_or_fail(b, t.type_size, "cache bytes per token");
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} B ({:.2f} {})", bytes, v, units[u]);
}

DType kv_plan_dtype(std::string_view name) {
  const auto t = dtype_from_name(name);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::BF16 && *t != DType::Q8_0 && *t != DType::Q4_0))
    fail("--dtype '{}' is not a cache number format; use f32, f16, bf16, q8_0 or q4_0", name);
  return *t;
}

std::vector<uint64_t> parse_token_list(std::string_view list) {
  std::vector<uint64_t> out;
  if (trim(list).empty()) fail("--tokens is empty; give context lengths such as 512,4096,32768");
  size_t start = 0;
  for (size_t i = 1;; ++i) {
    const size_t comma = list.find(',', start);
    const std::string_view entry = trim(list.substr(start, comma == std::string_view::npos ? list.npos : comma - start));
    if (entry.empty()) fail("--tokens '{}': entry {} is empty", list, i);
    const auto v = parse_whole(entry);
    if (!v) fail("--tokens '{}': entry {} '{}' is not a whole number of tokens", list, i, entry);
    if (*v == 0) fail("--tokens '{}': entry {} is zero; a context holds at least one token", list, i);
    out.push_back(*v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

uint64_t parse_byte_count(std::string_view text, std::string_view what) {
  const std::string_view t = trim(text);
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  const std::string_view unit = trim(t.substr(digits));
  uint64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1ull << 10;
  else if (unit == "MiB") scale = 1ull << 20;
  else if (unit == "GiB") scale = 1ull << 30;
  else if (unit == "TiB") scale = 1ull << 40;
  const auto v = parse_whole(t.substr(0, digits));
  if (!v || scale == 0)
    fail("{} '{}' is not a byte count; give a whole number of bytes, optionally with KiB, MiB, GiB or TiB", what,
         text);
  if (*v == 0) fail("{} is zero bytes", what);
  const auto bytes = checked_mul(*v, scale);
  if (!bytes) fail("{} '{}' overflows 64 bits", what, text);
  return *bytes;
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

std::vector<KvLayoutPlan> plan_kv(const KvPlanRequest& r) {
  const KvShape& s = r.shape;
  if (s.n_layer <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0 || r.n_head <= 0)
    fail("cache shape must be positive (layers {}, heads {}, kv heads {}, head_dim {})", s.n_layer, r.n_head,
         s.n_kv_head, s.head_dim);
  if (r.n_head % s.n_kv_head != 0)
    fail("{} query heads are not divisible into {} kv heads", r.n_head, s.n_kv_head);
  if (r.batch == 0) fail("--batch must be at least 1");
  if (r.contexts.empty()) fail("no context lengths to size");

  std::vector<KvLayoutPlan> out;
  const std::pair<const char*, int64_t> layouts[] = {{"model", s.n_kv_head}, {"mha", r.n_head}, {"mqa", 1}};
  for (const auto& [name, kv] : layouts) {
    KvLayoutPlan p;
    p.name = name;
    p.n_kv_head = kv;
    p.bytes_per_token = kv_bytes_per_token({s.n_layer, kv, s.head_dim}, r.type);
    for (uint64_t ctx : r.contexts) p.context_bytes.push_back(kv_cache_bytes(p.bytes_per_token, ctx, r.batch));
    if (r.weights_bytes) p.crossover_tokens = kv_crossover_tokens(*r.weights_bytes, p.bytes_per_token, r.batch);
    if (r.budget_bytes)
      p.max_tokens = kv_max_tokens(*r.budget_bytes, r.weights_bytes.value_or(0), p.bytes_per_token, r.batch);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tally
