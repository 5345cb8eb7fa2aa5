// tally kv-plan: sizes the KV cache of a model shape (from a GGUF, a Hugging
// Face config.json or explicit flags) for its own head layout and the MHA and
// MQA variants of the same model, beside the weights: totals per context, the
// context where decoding reads more cache than weights, and what fits a budget.
#include <fmt/format.h>

#include <cctype>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "sizing/kv_plan.h"
#include "sizing/hf_config.h"
#include "sizing/model_shape.h"
#include "usage.h"

namespace tally::cli {
namespace {

struct KvPlanOptions {
  std::string model, config;
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::string dtype = "f16";
  std::string tokens = "512,4096,32768";
  int64_t batch = 1;
  std::string budget, weights_bytes, weights_dtype;
  bool json = false;
  struct Given {
    bool layers = false, heads = false, kv_heads = false, head_dim = false, budget = false, weights_bytes = false;
  } given;

  void validate() const;
};

void KvPlanOptions::validate() const {
  if (!weights_dtype.empty() && config.empty())
    usage_fail("--weights-dtype sizes a config's weights (--config): {}",
               model.empty() ? "explicit --layers/--heads give no parameter count; use --weights-bytes"
                             : "a GGUF's tensors give their own bytes");
  if (!weights_dtype.empty() && given.weights_bytes)
    usage_fail("--weights-bytes and --weights-dtype both give the weights: give one");
}

// The plan and what it was made from.
struct KvPlanResult {
  ModelShape shape;
  KvPlanRequest request;
  std::vector<KvLayoutPlan> plans;
  std::string weights_from;  // "gguf", "config", "format" (--weights-dtype), "flag" or ""
  std::optional<WeightFormat> format;
};

std::string layout_title(const ModelShape& s, const KvLayoutPlan& p) {
  const std::string heads = fmt::format("{} kv head{}", p.n_kv_head, p.n_kv_head == 1 ? "" : "s");
  if (p.name == "model") return fmt::format("model: {}, {}", attention_kind(s.n_head, p.n_kv_head), heads);
  return fmt::format("as {}: {}", p.name == "mha" ? "MHA" : "MQA", heads);
}

// "bf16", as the --dtype flag spells it.
std::string flag_name(DType t) {
  std::string n(dtype_name(t));
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

std::string tokens_cell(const std::optional<uint64_t>& t) {
  if (t == kUnbounded) return "any context";
  return t ? fmt::format("{} tokens", *t) : std::string("n/a");
}

void print_text(const KvPlanResult& res) {
  const ModelShape& s = res.shape;
  const KvPlanRequest& r = res.request;
  const std::vector<KvLayoutPlan>& plans = res.plans;
  const std::string& weights_from = res.weights_from;
  // The source's path and model type are untrusted text: escaped for the terminal.
  PrintableOptions shown;
  shown.escape_quotes = false;
  std::string origin;
  if (s.text_config) origin = "text_config";
  if (!s.kind.empty()) origin += (origin.empty() ? "" : ", ") + printable(s.kind, shown);
  fmt::print("source:   {}{}\n", printable(s.source, shown), origin.empty() ? "" : fmt::format(" ({})", origin));
  fmt::print("shape:    {} layers, {} query heads, {} kv heads ({}, {} query heads per kv head), head_dim {}\n",
             s.n_layer, s.n_head, s.n_kv_head, attention_kind(s.n_head, s.n_kv_head), s.n_head / s.n_kv_head,
             s.head_dim);
  fmt::print("cache:    {} ({:g} bytes per number), batch {}{}\n", flag_name(r.type), kv_bytes_per_value(r.type),
             r.batch, r.batch > 1 ? fmt::format(" (totals cover all {} sequences)", r.batch) : "");
  if (!r.weights_bytes) {
    fmt::print("weights:  unknown (give --weights-bytes, -m GGUF or --config)\n");
  } else if (weights_from == "config") {
    fmt::print("weights:  {}: {} parameters x {} bytes ({}, counted from the config)\n",
               format_bytes(*r.weights_bytes), *s.parameters, hf_dtype_bytes(s.weights_dtype), s.weights_dtype);
  } else if (weights_from == "format") {
    fmt::print("weights:  {}: {} parameters x {:.4g} bits ({}{}, counted from the config)\n",
               format_bytes(*r.weights_bytes), *s.parameters, res.format->bits_per_weight, res.format->name,
               res.format->estimate ? ": a mix of formats, so an estimate" : "");
  } else if (weights_from == "gguf") {
    fmt::print("weights:  {}: {} parameters (the GGUF's tensors)\n", format_bytes(*r.weights_bytes), *s.parameters);
  } else {
    fmt::print("weights:  {} (--weights-bytes)\n", format_bytes(*r.weights_bytes));
  }
  if (r.window > 0)
    fmt::print("window:   {} of {} layers attend to the last {} positions and hold no more; {} hold the whole context\n",
               r.n_window_layers, s.n_layer, r.window, s.n_layer - r.n_window_layers);
  if (r.budget_bytes)
    fmt::print("budget:   {}{}\n", format_bytes(*r.budget_bytes),
               r.weights_bytes ? "" : " (weights unknown: the whole budget goes to the cache)");

  // Rows are quantities, columns the three head layouts.
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{""};
  for (const auto& p : plans) header.push_back(layout_title(s, p));
  rows.push_back(header);
  std::vector<std::string> row{"per token"};
  for (const auto& p : plans) row.push_back(format_bytes(p.bytes_per_token));
  rows.push_back(row);
  if (r.window > 0) {
    row = {fmt::format("per token past {}", r.window)};
    for (const auto& p : plans) row.push_back(format_bytes(p.bytes_per_token_past_window.value_or(0)));
    rows.push_back(row);
  }
  for (size_t i = 0; i < r.contexts.size(); ++i) {
    row = {fmt::format("{} tokens", r.contexts[i])};
    for (const auto& p : plans) row.push_back(format_bytes(p.context_bytes[i]));
    rows.push_back(row);
    if (plans.front().allocated_bytes.empty()) continue;
    row = {"  run allocates"};
    for (const auto& p : plans) row.push_back(p.allocated_bytes[i] ? format_bytes(*p.allocated_bytes[i]) : "-");
    rows.push_back(row);
  }
  row = {"crossover"};
  for (const auto& p : plans) row.push_back(tokens_cell(p.crossover_tokens));
  rows.push_back(row);
  if (r.budget_bytes) {
    row = {"fits budget"};
    for (const auto& p : plans) row.push_back(tokens_cell(p.max_tokens));
    rows.push_back(row);
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& rw : rows)
    for (size_t c = 0; c < rw.size(); ++c) width[c] = std::max(width[c], rw[c].size());
  fmt::print("\n");
  for (const auto& rw : rows) {
    std::string line;
    for (size_t c = 0; c < rw.size(); ++c) line += fmt::format("{:<{}}", rw[c], width[c] + (c + 1 < rw.size() ? 3 : 0));
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
  fmt::print("\ncrossover: the context at which one decode step reads as many cache bytes as weight bytes\n");
  if (!plans.front().allocated_bytes.empty())
    fmt::print("run allocates: the pool of `tally run -c N`: blocks of 32, and on the window layers the window,\n"
               "  a --batch of 512 and two blocks\n");
  if (r.budget_bytes) fmt::print("fits budget: the longest context whose cache fits beside the weights\n");
  // A budget that holds more than the model was trained for: the model, not the memory, is the limit.
  const auto& fit = plans.front().max_tokens;
  if (r.budget_bytes && s.trained_context && fit && *fit > static_cast<uint64_t>(*s.trained_context))
    fmt::print("note: the budget holds {} tokens, but the model was trained for {}; past that its output degrades\n",
               *fit == kUnbounded ? std::string("any number of") : fmt::format("{}", *fit), *s.trained_context);
}

void print_json(const KvPlanResult& res) {
  const ModelShape& s = res.shape;
  const KvPlanRequest& r = res.request;
  const std::vector<KvLayoutPlan>& plans = res.plans;
  const std::string& weights_from = res.weights_from;
  auto opt = [](const std::optional<uint64_t>& v) {
    if (v == kUnbounded) return nlohmann::json("unbounded");
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json layouts = nlohmann::json::array();
  for (const auto& p : plans) {
    nlohmann::json totals = nlohmann::json::array();
    for (size_t i = 0; i < r.contexts.size(); ++i)
      totals.push_back({{"tokens", r.contexts[i]},
                        {"bytes", p.context_bytes[i]},
                        {"allocated_bytes", i < p.allocated_bytes.size() ? opt(p.allocated_bytes[i]) : nullptr}});
    layouts.push_back({{"layout", p.name},
                       {"attention", attention_kind(s.n_head, p.n_kv_head)},
                       {"kv_heads", p.n_kv_head},
                       {"bytes_per_token", p.bytes_per_token},
                       {"bytes_per_token_past_window", opt(p.bytes_per_token_past_window)},
                       {"totals", totals},
                       {"crossover_tokens", opt(p.crossover_tokens)},
                       {"max_tokens", opt(p.max_tokens)}});
  }
  nlohmann::json j{{"source", s.source},
                   {"model_type", s.kind},
                   {"text_config", s.text_config},
                   {"layers", s.n_layer},
                   {"heads", s.n_head},
                   {"kv_heads", s.n_kv_head},
                   {"head_dim", s.head_dim},
                   {"sliding_window", r.window},
                   {"window_layers", r.n_window_layers},
                   {"dtype", flag_name(r.type)},
                   {"bytes_per_value", kv_bytes_per_value(r.type)},
                   {"batch", r.batch},
                   {"parameters", opt(weights_from == "flag" ? std::nullopt : s.parameters)},
                   {"weights_bytes", opt(r.weights_bytes)},
                   {"weights_from", weights_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(weights_from)},
                   {"budget_bytes", opt(r.budget_bytes)},
                   {"trained_context", s.trained_context ? nlohmann::json(*s.trained_context) : nlohmann::json(nullptr)},
                   {"layouts", layouts}};
  if (res.format) j["weights_bits"] = res.format->bits_per_weight;
  cli::print_json(j, 2);
}

KvPlanResult plan(const KvPlanOptions& o) {
  // The cheap flags first, before any file is read.
  KvPlanResult res;
  KvPlanRequest& r = res.request;
  r.type = kv_plan_dtype(o.dtype);
  r.contexts = parse_token_list(o.tokens);
  r.batch = static_cast<uint64_t>(o.batch);
  if (o.given.budget) r.budget_bytes = parse_byte_count(o.budget, "--budget");
  std::optional<uint64_t> weights_flag;
  if (o.given.weights_bytes) weights_flag = parse_byte_count(o.weights_bytes, "--weights-bytes");
  if (!o.weights_dtype.empty()) res.format = weight_format(o.weights_dtype);

  ShapeSource src;
  src.gguf = o.model.empty() ? o.model : model_path(o.model);
  src.config = o.config;
  if (o.given.layers) src.layers = o.layers;
  if (o.given.heads) src.heads = o.heads;
  if (o.given.kv_heads) src.kv_heads = o.kv_heads;
  if (o.given.head_dim) src.head_dim = o.head_dim;
  src.want_weights = !weights_flag;
  if (res.format) src.weights_bits = res.format->bits_per_weight;
  res.shape = read_model_shape(src);
  const ModelShape& s = res.shape;
  if (weights_flag) {
    r.weights_bytes = weights_flag;
    res.weights_from = "flag";
  } else if (s.weights_bytes) {
    r.weights_bytes = s.weights_bytes;
    res.weights_from = !o.model.empty() ? "gguf" : res.format ? "format" : "config";
  }
  r.shape = s.kv();
  r.n_head = s.n_head;
  r.window = static_cast<uint64_t>(s.window);
  r.n_window_layers = s.n_window_layers();
  res.plans = plan_kv(r);
  return res;
}

}  // namespace

void add_kv_plan(CLI::App& app) {
  auto o = std::make_shared<KvPlanOptions>();
  auto* cmd = app.add_subcommand(
      "kv-plan", "Size the KV cache of a model shape, its MHA and MQA variants, against the weights and a budget");
  cmd->add_option("-m,--model", o->model,
                  "Model to read the shape and weight bytes from: a GGUF file, HF folder, catalog name or file in "
                  "$TALLY_HOME/models")
      ->check(nonempty_path());
  cmd->add_option("--config", o->config, "Hugging Face config.json (its text_config when present)")
      ->check(nonempty_path());
  constexpr int64_t kMaxDim = INT32_MAX;
  auto* layers = cmd->add_option("--layers", o->layers, "Explicit shape: decoder blocks")->transform(integer_in(1, kMaxDim));
  auto* heads = cmd->add_option("--heads", o->heads, "Explicit shape: query heads")->transform(integer_in(1, kMaxDim));
  auto* kv_heads =
      cmd->add_option("--kv-heads", o->kv_heads, "Explicit shape: key/value heads")->transform(integer_in(1, kMaxDim));
  auto* head_dim =
      cmd->add_option("--head-dim", o->head_dim, "Explicit shape: numbers per head")->transform(integer_in(1, kMaxDim));
  cmd->add_option("--dtype", o->dtype, "Cache number format: f32, f16, bf16, q8_0, q4_0")
      ->capture_default_str()
      ->check(one_of({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--tokens", o->tokens, "Context lengths to size, comma-separated (e.g. 512,4k,32K)")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences held at once (multiplies the cache)")
      ->capture_default_str()
      ->transform(integer_in(1, INT32_MAX));
  auto* budget = cmd->add_option("--budget", o->budget,
                                 "Memory for weights + cache: BYTES, or with a unit (24GB, 24GiB, 4.5GiB)")
                     ->check(byte_count_in("--budget", 1, UINT64_MAX));
  auto* weights_bytes =
      cmd->add_option("--weights-bytes", o->weights_bytes, "Weight bytes, e.g. 4.9GiB (overrides the source's)")
          ->check(byte_count_in("--weights-bytes", 1, UINT64_MAX));
  std::vector<std::string> formats;
  const std::string format_names = weight_format_names();
  for (std::string_view rest = format_names; !rest.empty();) {
    const size_t comma = rest.find(", ");
    formats.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
  }
  cmd->add_option("--weights-dtype", o->weights_dtype,
                  "With --config: the weights as a GGUF stores them (" + weight_format_names() +
                      "), instead of the config's torch_dtype")
      ->check(one_of(formats));
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, layers, heads, kv_heads, head_dim, budget, weights_bytes] {
    o->given = {layers->count() > 0, heads->count() > 0, kv_heads->count() > 0,
                head_dim->count() > 0, budget->count() > 0, weights_bytes->count() > 0};
    o->validate();
    const KvPlanResult r = plan(*o);
    o->json ? print_json(r) : print_text(r);
  });
}

}  // namespace tally::cli
