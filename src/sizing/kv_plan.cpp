#include "sizing/kv_plan.h"

#include "core/byte_size.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"

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
    const auto v = parse_whole(entry);
    if (!v) fail("--tokens '{}': entry {} '{}' is not a whole number of tokens", excerpt(list), i, excerpt(entry));
    if (*v == 0) fail("--tokens '{}': entry {} is zero; a context holds at least one token", excerpt(list), i);
    out.push_back(*v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
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
