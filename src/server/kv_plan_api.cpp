#include "server/kv_plan_api.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "model/model_config.h"
#include "server/api_error.h"
#include "server/requests.h"
#include "sizing/kv_plan.h"

namespace tally::server {

using nlohmann::json;

namespace {

constexpr size_t kMaxContexts = 256;

// A whole number in [1, 2^31]; absent: `fallback`.
int64_t positive(const json& b, const char* k, int64_t fallback) {
  if (!b.contains(k)) return fallback;
  const json& v = b[k];
  if (!v.is_number_integer()) bad_request(k, "'{}' must be a whole number, not {}", k, json_type(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxModelDim))
    bad_request(k, "'{}' must be between 1 and 2^31", k);
  const int64_t x = v.get<int64_t>();
  if (x < 1 || x > kMaxModelDim) bad_request(k, "'{}' must be between 1 and 2^31, got {}", k, x);
  return x;
}

// A byte count: a whole number of bytes, or a size with a unit ("24GiB") as the CLI's flags take it.
std::optional<uint64_t> byte_count(const json& b, const char* k) {
  if (!b.contains(k)) return std::nullopt;
  const json& v = b[k];
  if (v.is_number_unsigned() && v.get<uint64_t>() > 0) return v.get<uint64_t>();
  if (v.is_number_integer()) bad_request(k, "'{}' must be more than 0 bytes", k);
  if (!v.is_string())
    bad_request(k, "'{}' must be a whole number of bytes or a size such as \"24GiB\", not {}", k, json_type(v));
  try {
    return parse_byte_count(v.get<std::string>(), fmt::format("'{}'", k));
  } catch (const Error& e) {
    bad_request(k, "{}", e.what());
  }
}

json or_null(const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); }

// A context length, "unbounded" (every context fits, or the cache never outgrows the weights) or null (unknown).
json tokens_or_unbounded(const std::optional<uint64_t>& v) {
  if (v == kUnbounded) return "unbounded";
  return v ? json(*v) : json(nullptr);
}

}  // namespace

json kv_plan_response(const json& b, const ModelShape& model) {
  const int64_t layers = positive(b, "layers", model.n_layer);
  const int64_t heads = positive(b, "heads", model.n_head);
  const int64_t kv_heads = positive(b, "kv_heads", model.n_kv_head);
  const int64_t head_dim = positive(b, "head_dim", model.head_dim);
  if (heads % kv_heads != 0)
    bad_request("kv_heads", "'heads' {} is not divisible by 'kv_heads' {} (each kv head serves a whole group of query heads)",
                heads, kv_heads);
  const bool model_shape = layers == model.n_layer && heads == model.n_head && kv_heads == model.n_kv_head &&
                           head_dim == model.head_dim;

  KvPlanRequest r;
  r.shape = {layers, kv_heads, head_dim};
  r.n_head = heads;
  if (model_shape) {
    r.window = static_cast<uint64_t>(model.window);
    r.n_window_layers = model.n_window_layers();
  }
  if (b.contains("dtype")) {
    if (!b["dtype"].is_string()) bad_request("dtype", "'dtype' must be a string, not {}", json_type(b["dtype"]));
    try {
      r.type = kv_plan_dtype(b["dtype"].get<std::string>());
    } catch (const Error& e) {
      bad_request("dtype", "{}", e.what());
    }
  }
  if (b.contains("tokens")) {
    if (!b["tokens"].is_array()) bad_request("tokens", "'tokens' must be a list of context lengths");
    if (b["tokens"].empty()) bad_request("tokens", "'tokens' must hold at least one context length");
    // Each context costs a row per layout in the answer: a cap keeps a small body from asking for a huge one.
    if (b["tokens"].size() > kMaxContexts)
      bad_request("tokens", "'tokens' holds {} context lengths; at most {} are sized at once", b["tokens"].size(), kMaxContexts);
    r.contexts.clear();
    for (const json& v : b["tokens"]) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() == 0) bad_request("tokens", "'tokens' must hold positive whole numbers");
      r.contexts.push_back(v.get<uint64_t>());
    }
  }
  r.batch = static_cast<uint64_t>(positive(b, "batch", 1));
  std::string weights_from;
  r.weights_bytes = byte_count(b, "weights_bytes");
  if (r.weights_bytes) {
    weights_from = "request";
  } else if (model_shape && model.weights_bytes) {
    r.weights_bytes = model.weights_bytes;
    weights_from = "model";
  }
  r.budget_bytes = byte_count(b, "budget");
  if (r.budget_bytes && r.weights_bytes && *r.budget_bytes < *r.weights_bytes)
    bad_request("budget", "'budget' {} is smaller than the weights alone ({}); no cache fits", format_bytes(*r.budget_bytes),
                format_bytes(*r.weights_bytes));

  std::vector<KvLayoutPlan> plans;
  try {
    plans = plan_kv(r);
  } catch (const Error& e) {  // a product past 64 bits
    throw ApiError(400, "invalid_request_error", e.what());
  }
  json layouts = json::array();
  for (const auto& p : plans) {
    json totals = json::array();
    for (size_t i = 0; i < p.context_bytes.size(); ++i) {
      json t{{"tokens", r.contexts[i]}, {"bytes", p.context_bytes[i]}, {"text", format_bytes(p.context_bytes[i])}};
      t["allocated_bytes"] = i < p.allocated_bytes.size() ? or_null(p.allocated_bytes[i]) : json(nullptr);
      totals.push_back(std::move(t));
    }
    layouts.push_back({{"layout", p.name},
                       {"attention", attention_kind(r.n_head, p.n_kv_head)},
                       {"kv_heads", p.n_kv_head},
                       {"bytes_per_token", p.bytes_per_token},
                       {"bytes_per_token_past_window", or_null(p.bytes_per_token_past_window)},
                       {"totals", totals},
                       {"crossover_tokens", tokens_or_unbounded(p.crossover_tokens)},
                       {"max_tokens", tokens_or_unbounded(p.max_tokens)}});
  }
  return {{"shape_from", model_shape ? "model" : "request"},
          {"layers", layers},
          {"heads", heads},
          {"kv_heads", kv_heads},
          {"head_dim", head_dim},
          {"sliding_window", r.window},
          {"window_layers", r.n_window_layers},
          {"dtype", dtype_name(r.type)},
          {"bytes_per_value", kv_bytes_per_value(r.type)},
          {"batch", r.batch},
          {"weights_bytes", or_null(r.weights_bytes)},
          {"weights_from", weights_from.empty() ? json(nullptr) : json(weights_from)},
          {"budget_bytes", or_null(r.budget_bytes)},
          {"layouts", layouts}};
}

}  // namespace tally::server
