// tally lab: the experiments of docs/lab.md (the questions tally was built
// to answer about a KV cache) on a real model, one subcommand each: each
// runs its experiment (src/lab) into a report, and a printer per report
// writes it as text or JSON.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "bench/progress.h"
#include "commands.h"
#include "encode_input.h"
#include "option_checks.h"
#include "output.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "io/text_file.h"
#include "kernels/kv_quant.h"
#include "kv/kv_cache.h"
#include "kv/kv_shape.h"
#include "lab/beam_cost.h"
#include "lab/cache_speedup.h"
#include "lab/causal_experiment.h"
#include "lab/continuity.h"
#include "lab/depth_sweep.h"
#include "lab/kv_quant_quality.h"
#include "lab/plot.h"
#include "lab/score_count.h"
#include "lab/sinks_experiment.h"
#include "lab/speculation_experiment.h"
#include "speculation_options.h"
#include "model_options.h"
#include "usage.h"

namespace tally::cli {
namespace {

constexpr const char* kDefaultPrompt =
    "The cache keeps the keys and values of every earlier token, so that each new token only has to be "
    "compared with what is already written down instead of recomputing the whole past.";

std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const std::string& text, int64_t want = 0) {
  auto ids = encode_input(tok, text, true, true, "the prompt");
  if (ids.empty()) fail("the prompt has no tokens");
  if (want > 0) {
    std::vector<int32_t> out;
    while (static_cast<int64_t>(out.size()) < want) out.push_back(ids[out.size() % ids.size()]);
    ids = out;
  }
  return ids;
}

// The shared flags an experiment uses: each sizes its own cache from its own
// flags, so -c, --batch and --kv-budget would be ignored and are not taken.
void add_lab_model_options(CLI::App* cmd, ModelOptions& o) { add_model_options(cmd, o, kModel | kThreads | kSimd | kGpuLayers); }

// A lab function's progress(done, total) callback drawing on `p` (stderr, terminals only).
auto draw_on(Progress& p, std::string what) {
  return [&p, what = std::move(what)](int64_t done, int64_t total) {
    p.update(what, static_cast<double>(done), static_cast<double>(total));
  };
}

// ---- causal: does adding a token change what came before?

struct CausalOptions {
  ModelOptions m;
  std::string prompt = kDefaultPrompt;
  bool json = false;
};

CausalReport run_causal(const CausalOptions& o) {
  LoadedModel lm = load_model(o.m);
  return run_causal_experiment(*lm.model, prompt_tokens(*lm.tokenizer, o.prompt), o.m.threads);
}

void print_causal(const CausalOptions& o, const CausalReport& r) {
  if (o.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& L : r.per_layer)
      layers.push_back({{"layer", L.layer}, {"masked_k", L.masked_k}, {"masked_v", L.masked_v},
                        {"unmasked_k", L.unmasked_k}, {"unmasked_v", L.unmasked_v}});
    cli::print_json({{"n_tokens", r.n_tokens}, {"masked_max_diff", r.masked_max_diff},
                     {"unmasked_max_diff", r.unmasked_max_diff}, {"masked_max_relative", r.masked_max_relative},
                     {"unmasked_max_relative", r.unmasked_max_relative}, {"per_layer", layers}},
                    2);
    return;
  }
  fmt::print("N = {} tokens, then N + 1; max |diff| over the first N positions (hidden states and logits):\n",
             r.n_tokens);
  fmt::print("  causal mask on:  {:.3g} (relative {:.3g})\n", r.masked_max_diff, r.masked_max_relative);
  fmt::print("  causal mask off: {:.3g} (relative {:.3g})\n\n", r.unmasked_max_diff, r.unmasked_max_relative);
  fmt::print("  layer  K masked  V masked  K unmasked  V unmasked\n");
  for (const auto& L : r.per_layer)
    fmt::print("  {:>5}  {:>8.3g}  {:>8.3g}  {:>10.3g}  {:>10.3g}\n", L.layer, L.masked_k, L.masked_v, L.unmasked_k,
               L.unmasked_v);
}

void add_causal(CLI::App* lab) {
  auto o = std::make_shared<CausalOptions>();
  auto* cmd = lab->add_subcommand("causal", "Add one token: do earlier outputs and K/V change, with and without the mask?");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "The N + 1 tokens (the last one is the added token)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_causal(*o, run_causal(*o));
  });
}

// ---- scores: how many (query, key) scores with and without a cache

struct ScoresOptions {
  ModelOptions m;
  int64_t n = 100;
  int64_t recompute_limit = 200;
  bool no_measure = false, json = false;
};

ScoreCounts run_scores(const ScoresOptions& o) {
  ScoreCounts c = score_formulas(o.n);
  if (o.no_measure) return c;
  LoadedModel lm = load_model(o.m);
  const int32_t first = lm.tokenizer->encode("The", false, false).at(0);
  {
    Progress p("tally lab scores");
    c.cached_measured = measure_scores(*lm.model, first, o.n, true, o.m.threads,
                                       draw_on(p, fmt::format("{} tokens with the cache", o.n)));
  }
  if (o.n <= o.recompute_limit) {
    Progress p("tally lab scores");
    c.recompute_measured = measure_scores(*lm.model, first, o.n, false, o.m.threads,
                                          draw_on(p, fmt::format("{} tokens recomputing", o.n)));
  }
  return c;
}

void print_scores(const ScoresOptions& o, const ScoreCounts& c) {
  const double ratio = static_cast<double>(c.recompute_formula) / static_cast<double>(c.cached_formula);
  if (o.json) {
    nlohmann::json j{{"n", c.n}, {"recompute", c.recompute_formula}, {"cached", c.cached_formula}, {"ratio", ratio}};
    if (c.cached_measured) j["cached_measured"] = *c.cached_measured;
    if (c.recompute_measured) j["recompute_measured"] = *c.recompute_measured;
    cli::print_json(j, 2);
    return;
  }
  auto measured = [](const std::optional<uint64_t>& m, uint64_t formula) {
    return m ? fmt::format("{} measured ({})", *m, *m == formula ? "equal" : "DIFFERENT") : std::string("not measured");
  };
  fmt::print("writing N = {} tokens, one head of one block:\n", c.n);
  fmt::print("  recompute every step (1^2 + ... + N^2): {:>14}   {}\n", c.recompute_formula,
             measured(c.recompute_measured, c.recompute_formula));
  fmt::print("  with a KV cache (N(N+1)/2):             {:>14}   {}\n", c.cached_formula,
             measured(c.cached_measured, c.cached_formula));
  fmt::print("  the cache computes {:.1f}x fewer scores\n", ratio);
}

void add_scores(CLI::App* lab) {
  auto o = std::make_shared<ScoresOptions>();
  auto* cmd = lab->add_subcommand("scores", "(query, key) scores for one head of one block while writing N tokens");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("-n", o->n, "Tokens to write")->capture_default_str()->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--recompute-limit", o->recompute_limit,
                  "Measure the no-cache count only up to this N (its cost grows as N^2)")
      ->capture_default_str()
      ->transform(token_count_in(0, kMaxContextTokens));
  cmd->add_flag("--no-measure", o->no_measure, "Print the formulas only (no model needed)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_scores(*o, run_scores(*o));
  });
}

// ---- speedup: time per token with and without the cache

struct SpeedupOptions {
  ModelOptions m;
  std::string prompt = kDefaultPrompt, plot;
  int64_t prompt_tokens = 16, gen_tokens = 512;
  bool json = false;
};

SpeedupReport run_speedup(const SpeedupOptions& o) {
  LoadedModel lm = load_model(o.m);
  const int64_t trained = lm.model->config().n_ctx_train;
  if (o.prompt_tokens + o.gen_tokens > trained)
    fail("--prompt-tokens {} + --gen-tokens {} exceed the model's trained context of {}", o.prompt_tokens,
         o.gen_tokens, trained);
  const auto ids = prompt_tokens(*lm.tokenizer, o.prompt, o.prompt_tokens);
  std::vector<int64_t> checkpoints;
  for (int64_t n = 1; n < o.gen_tokens; n *= 2) checkpoints.push_back(n);
  checkpoints.push_back(o.gen_tokens);
  Progress progress("tally lab speedup");
  return measure_cache_speedup(*lm.model, ids, o.gen_tokens, checkpoints, o.m.threads,
                               draw_on(progress, fmt::format("{} tokens, cached then recomputed", o.gen_tokens)));
}

void print_speedup(const SpeedupOptions& o, const SpeedupReport& r) {
  if (!o.plot.empty()) {
    PlotSpec p{"Time to write N tokens: KV cache vs recomputing", "tokens generated (N)", "total ms", {}, -1, "", true};
    PlotSeries a{"with KV cache", {}, {}}, b{"no cache (recompute)", {}, {}};
    for (const auto& pt : r.points) {
      a.x.push_back(pt.n), a.y.push_back(pt.cache_total_ms);
      b.x.push_back(pt.n), b.y.push_back(pt.nocache_total_ms);
    }
    p.series = {a, b};
    write_plot_png(o.plot, p);
  }
  if (o.json) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& pt : r.points)
      pts.push_back({{"n", pt.n}, {"cache_total_ms", pt.cache_total_ms}, {"nocache_total_ms", pt.nocache_total_ms},
                     {"cache_ms_per_token", pt.cache_ms_per_token}, {"nocache_ms_per_token", pt.nocache_ms_per_token},
                     {"ratio", pt.ratio}});
    cli::print_json({{"prompt_tokens", r.prompt_tokens}, {"same_tokens", r.same_tokens}, {"points", pts}}, 2);
    return;
  }
  fmt::print("prompt {} tokens; cache and no-cache wrote {} tokens\n", r.prompt_tokens,
             r.same_tokens ? "the same" : "DIFFERENT");
  fmt::print("  {:>6}  {:>12}  {:>12}  {:>14}  {:>14}  {:>7}\n", "N", "cache ms", "no-cache ms", "cache ms/tok",
             "no-cache ms/tok", "ratio");
  for (const auto& pt : r.points)
    fmt::print("  {:>6}  {:>12.1f}  {:>12.1f}  {:>14.2f}  {:>14.2f}  {:>6.2f}x\n", pt.n, pt.cache_total_ms,
               pt.nocache_total_ms, pt.cache_ms_per_token, pt.nocache_ms_per_token, pt.ratio);
}

void add_speedup(CLI::App* lab) {
  auto o = std::make_shared<SpeedupOptions>();
  auto* cmd = lab->add_subcommand("speedup", "Time per generated token with and without the cache");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (cycled or cut to --prompt-tokens)");
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length in tokens")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--gen-tokens", o->gen_tokens, "Tokens to generate")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--plot", o->plot, "Write a PNG plot here")->check(output_file("plot"));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_speedup(*o, run_speedup(*o));
  });
}

// ---- depth: decode speed against the cache's depth

struct DepthOptions {
  ModelOptions m;
  std::string plot;
  int64_t max_depth = 8192, decode_tokens = 16;
  bool json = false;
};

DepthReport run_depth(const DepthOptions& o) {
  LoadedModel lm = load_model(o.m);
  const int64_t limit = std::min(o.max_depth, lm.model->config().n_ctx_train - o.decode_tokens - 1);
  if (limit < 0)
    fail("--decode-tokens {} leave no depth within the model's trained context of {}", o.decode_tokens,
         lm.model->config().n_ctx_train);
  std::vector<int64_t> depths{0};
  for (int64_t d = 256; d < limit; d *= 2) depths.push_back(d);
  if (limit > 0) depths.push_back(limit);
  const auto filler = prompt_tokens(*lm.tokenizer, kDefaultPrompt);
  const DType ct = session_options(o.m, *lm.model, false).cache_type;
  Progress progress("tally lab depth");
  return measure_depth(*lm.model, filler, depths, o.decode_tokens, ct, o.m.threads,
                       draw_on(progress, fmt::format("depths 0 to {}", depths.back())));
}

void print_depth(const DepthOptions& o, const DepthReport& r) {
  if (!o.plot.empty()) {
    PlotSpec p{"Decode speed against context depth", "tokens in the cache", "decode tokens/s", {},
               static_cast<double>(r.crossover_context), "K/V read = weights read", false};
    PlotSeries s{"decode tokens/s", {}, {}};
    for (const auto& pt : r.points) s.x.push_back(pt.depth), s.y.push_back(pt.decode_tps);
    p.series = {s};
    write_plot_png(o.plot, p);
  }
  if (o.json) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& pt : r.points)
      pts.push_back({{"depth", pt.depth}, {"decode_tps", pt.decode_tps}, {"ms_per_token", pt.ms_per_token},
                     {"kv_bytes_read", pt.kv_bytes_read}, {"weight_bytes_read", pt.weight_bytes_read}});
    cli::print_json({{"kv_bytes_per_token", r.kv_bytes_per_token}, {"weight_bytes", r.weight_bytes},
                     {"crossover_context", r.crossover_context}, {"points", pts}},
                    2);
    return;
  }
  fmt::print("K/V per token {}, weights {}: the cache outweighs the weights past {} tokens\n",
             format_bytes(r.kv_bytes_per_token), format_bytes(r.weight_bytes), r.crossover_context);
  fmt::print("  {:>6}  {:>10}  {:>10}  {:>14}\n", "depth", "tok/s", "ms/tok", "K/V : weights");
  for (const auto& pt : r.points)
    fmt::print("  {:>6}  {:>10.1f}  {:>10.2f}  {:>14.2f}\n", pt.depth, pt.decode_tps, pt.ms_per_token,
               static_cast<double>(pt.kv_bytes_read) / static_cast<double>(pt.weight_bytes_read));
}

void add_depth(CLI::App* lab) {
  auto o = std::make_shared<DepthOptions>();
  auto* cmd = lab->add_subcommand("depth", "Decode tokens/s against context depth, beside the crossover context");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("--max-depth", o->max_depth, "Deepest context (capped at the trained context)")
      ->capture_default_str()
      ->transform(token_count_in(0, kMaxContextTokens));
  cmd->add_option("--decode-tokens", o->decode_tokens, "Timed decode steps per depth")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--cache-type", o->m.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")
      ->capture_default_str()
      ->check(one_of({"f16", "f32", "q8_0", "q4_0"}));
  cmd->add_option("--plot", o->plot, "Write a PNG plot here")->check(output_file("plot"));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_depth(*o, run_depth(*o));
  });
}

// ---- continuity: a wrong start position is refused; an edit recomputes from itself

struct ContinuityOptions {
  ModelOptions m;
  std::string prompt = kDefaultPrompt;
  int64_t edit_at = -1;
  bool json = false;
};

ContinuityReport run_continuity(const ContinuityOptions& o) {
  LoadedModel lm = load_model(o.m);
  const auto ids = prompt_tokens(*lm.tokenizer, o.prompt);
  if (o.edit_at >= static_cast<int64_t>(ids.size()))
    fail("--edit-at {} is past the prompt's last token ({} tokens)", o.edit_at, ids.size());
  const int64_t k = o.edit_at >= 0 ? o.edit_at : static_cast<int64_t>(ids.size()) / 2;
  const int32_t replacement = lm.tokenizer->encode(" banana", false, false).at(0);
  return run_continuity_experiment(*lm.model, ids, k, replacement, o.m.threads);
}

void print_continuity(const ContinuityOptions& o, const ContinuityReport& r) {
  if (o.json) {
    cli::print_json({{"prompt_tokens", r.prompt_tokens}, {"stale_start_refused", r.stale_start_refused},
                     {"gap_start_refused", r.gap_start_refused}, {"refusal_message", r.refusal_message},
                     {"edit_at", r.edit_at}, {"recomputed_positions", r.recomputed_positions},
                     {"fresh_positions", r.fresh_positions}, {"max_logit_diff", r.max_logit_diff},
                     {"work_saved", r.work_saved}},
                    2);
    return;
  }
  fmt::print("prompt of {} tokens in the cache\n", r.prompt_tokens);
  fmt::print("  decode step at position {} (re-writing the past): {}\n", r.prompt_tokens - 1,
             r.stale_start_refused ? "refused" : "ACCEPTED");
  fmt::print("  decode step at position {} (skipping one):       {}\n", r.prompt_tokens + 1,
             r.gap_start_refused ? "refused" : "ACCEPTED");
  fmt::print("  the error: {}\n", r.refusal_message);
  fmt::print("edit token {}: recomputed {} positions (a fresh run computes {}), {:.0f}% of the work saved\n",
             r.edit_at, r.recomputed_positions, r.fresh_positions, 100 * r.work_saved);
  fmt::print("  max |logit diff| against the fresh run: {:.3g}\n", r.max_logit_diff);
}

void add_continuity(CLI::App* lab) {
  auto o = std::make_shared<ContinuityOptions>();
  auto* cmd = lab->add_subcommand("continuity", "Refuse a wrong start position; edit a token and recompute only from it");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("--edit-at", o->edit_at, "Token to edit (default: the middle)")
      ->transform(integer_in(0, kMaxContextTokens));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_continuity(*o, run_continuity(*o));
  });
}

// ---- beam: beam search's cost with shared blocks, copied caches and no cache

struct BeamLabOptions {
  ModelOptions m;
  std::string prompt = kDefaultPrompt, plot;
  BeamCostOptions b;
  bool json = false;
};

std::vector<BeamCostRow> run_beam(BeamLabOptions o) {
  LoadedModel lm = load_model(o.m);
  o.b.n_threads = o.m.threads;
  const auto ids = prompt_tokens(*lm.tokenizer, o.prompt, *std::max_element(o.b.prompts.begin(), o.b.prompts.end()));
  Progress progress("tally lab beam");
  return measure_beam_cost(*lm.model, ids, o.b, draw_on(progress, "beam searches"));
}

void print_beam(const BeamLabOptions& o, const std::vector<BeamCostRow>& rows) {
  if (!o.plot.empty()) {
    PlotSpec p{fmt::format("Beam search, {} generated tokens: K/V held at the peak", o.b.gen_tokens), "beam width",
               "MiB of K/V held (peak)", {}, -1, "", false};
    for (int64_t len : o.b.prompts)
      for (const char* mode : {"shared", "copied"}) {
        PlotSeries s{fmt::format("{} blocks, prompt {}", mode, len), {}, {}};
        for (const auto& r : rows)
          if (r.prompt_tokens == len && r.mode == mode)
            s.x.push_back(r.width), s.y.push_back(static_cast<double>(r.peak_held_bytes) / (1 << 20));
        p.series.push_back(s);
      }
    write_plot_png(o.plot, p);
  }
  if (o.json) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : rows)
      a.push_back({{"width", r.width}, {"prompt_tokens", r.prompt_tokens}, {"mode", r.mode},
                   {"generated", r.generated}, {"steps_timed", r.steps_timed},
                   {"peak_held_bytes", r.peak_held_bytes}, {"copied_bytes", r.copied_bytes},
                   {"ms_per_token", r.ms_per_token}, {"total_ms", r.total_ms}, {"same_beams", r.same_beams}});
    cli::print_json({{"gen_tokens", o.b.gen_tokens}, {"rows", a}}, 2);
    return;
  }
  fmt::print("| prompt | width | cache | K/V held (peak) | K/V copied | ms per token | total ms | best beam |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    fmt::print("| {} | {} | {} | {:.1f} MiB | {:.1f} MiB | {:.1f}{} | {:.0f}{} | {} |\n", r.prompt_tokens, r.width,
               r.mode, static_cast<double>(r.peak_held_bytes) / (1 << 20),
               static_cast<double>(r.copied_bytes) / (1 << 20), r.ms_per_token,
               r.mode == "none" ? fmt::format(" ({} steps)", r.steps_timed) : "", r.total_ms,
               r.mode == "none" ? " (extrapolated)" : "",
               r.mode == "shared" ? "-" : r.mode == "copied" ? (r.same_beams ? "same as shared" : "DIFFERENT") : "not compared");
}

void add_beam(CLI::App* lab) {
  auto o = std::make_shared<BeamLabOptions>();
  auto* cmd = lab->add_subcommand(
      "beam", "Beam search's cost and gain with a cache: shared blocks, copied caches and no cache");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (cycled or cut to each --prompt-tokens)");
  cmd->add_option("--widths", o->b.widths, "Beam widths, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(integer_in(1, kMaxParallel));
  cmd->add_option("--prompt-tokens", o->b.prompts, "Prompt lengths, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--gen-tokens", o->b.gen_tokens, "Tokens to generate")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--none-steps", o->b.none_steps, "Steps the no-cache search is timed over")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens));
  cmd->add_option("--plot", o->plot, "Write a PNG plot of K/V bytes held and time per token")
      ->check(output_file("plot"));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    if (o->b.prompts.empty() || o->b.widths.empty()) usage_fail("give at least one width and one prompt length");
    print_beam(*o, run_beam(*o));
  });
}

// ---- sinks: StreamingLLM's figure

struct SinksLabOptions {
  ModelOptions m;
  std::string text, plot;
  int64_t tokens = 20000;
  SinksOptions s;
  bool no_dense = false, json = false;
};

struct SinksResult {
  std::vector<SinksRow> rows;
  size_t tokens = 0;
  int64_t trained_context = 0;
};

SinksResult run_sinks(SinksLabOptions o) {
  const std::string text = read_text_file(o.text, "text file", kMaxTextBytes);
  LoadedModel lm = load_model(o.m);
  auto ids = encode_input(*lm.tokenizer, text, true, false, "the text file");
  if (static_cast<int64_t>(ids.size()) < o.tokens)
    fail("--text {} has {} tokens, fewer than --tokens {}", o.text, ids.size(), o.tokens);
  ids.resize(static_cast<size_t>(o.tokens));
  o.s.dense = !o.no_dense;
  o.s.n_threads = o.m.threads;
  Progress progress("tally lab sinks");
  SinksResult r;
  r.rows = measure_sinks(*lm.model, ids, o.s, draw_on(progress, "scoring the text"));
  r.tokens = ids.size();
  r.trained_context = lm.model->config().n_ctx_train;
  return r;
}

void print_sinks(const SinksLabOptions& o, const SinksResult& res) {
  if (!o.plot.empty()) {
    PlotSpec p{fmt::format("Perplexity per 1,000 tokens, window of {}", o.s.window), "tokens (thousands)",
               "perplexity", {}, static_cast<double>(res.trained_context) / 1000, "trained context", true};
    for (const auto& r : res.rows) {
      PlotSeries ser{r.config, {}, {}};
      for (size_t i = 0; i < r.ppl.size(); ++i)
        if (r.ppl[i] > 0) ser.x.push_back(static_cast<double>(i) + 0.5), ser.y.push_back(r.ppl[i]);
      p.series.push_back(ser);
    }
    write_plot_png(o.plot, p);
  }
  if (o.json) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : res.rows)
      a.push_back({{"config", r.config}, {"sinks", r.sinks}, {"ppl_per_1000", r.ppl}, {"ppl", r.ppl_all},
                   {"ppl_sampled", r.ppl_sampled}, {"scored", r.scored}, {"decode_ms_per_token", r.decode_ms_per_token}});
    cli::print_json({{"tokens", res.tokens}, {"window", o.s.window}, {"rows", a}});
    return;
  }
  fmt::print("{} tokens, window {}, trained context {}\n", res.tokens, o.s.window, res.trained_context);
  fmt::print("| cache | perplexity | at the recompute samples | scored | ms per token | perplexity per 1,000 tokens |\n"
             "|---|---|---|---|---|---|\n");
  for (const auto& r : res.rows) {
    std::string per;
    for (double v : r.ppl) per += fmt::format("{}{:.1f}", per.empty() ? "" : " ", v);
    fmt::print("| {} | {:.2f} | {:.2f} | {} | {:.1f} | {} |\n", r.config, r.ppl_all, r.ppl_sampled, r.scored,
               r.decode_ms_per_token, per);
  }
}

void add_sinks(CLI::App* lab) {
  auto o = std::make_shared<SinksLabOptions>();
  auto* cmd = lab->add_subcommand(
      "sinks", "StreamingLLM's figure: perplexity per 1,000 tokens of a long text with dense, window, sinks and recompute");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("--text", o->text, "A long text file (public domain; at least --tokens tokens)")
      ->required()
      ->check(nonempty_path());
  cmd->add_option("--tokens", o->tokens, "Tokens of the text to score")
      ->capture_default_str()
      ->transform(token_count_in(2, kMaxContextTokens));
  cmd->add_option("--window", o->s.window, "Positions the cache holds")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--sinks", o->s.sinks, "Sink counts, comma-separated (0: plain window)")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(integer_in(0, kMaxContextTokens));
  cmd->add_option("--recompute-every", o->s.recompute_every, "Score the recompute baseline every K tokens")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens));
  cmd->add_flag("--no-dense", o->no_dense, "Skip the dense run (its cache holds every position)");
  cmd->add_option("--plot", o->plot, "Write a PNG plot of perplexity per 1,000 tokens")->check(output_file("plot"));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_sinks(*o, run_sinks(*o));
  });
}

// ---- kv-quant: what a quantized cache costs in quality

struct KvQuantLabOptions {
  ModelOptions m;
  std::string text;
  KvQuantOptions q;
  bool json = false;
};

struct KvQuantResult {
  KvQuantReport report;
  size_t text_tokens = 0;
};

KvQuantResult run_kv_quant(KvQuantLabOptions o) {
  const std::string text = read_text_file(o.text, "text file", kMaxTextBytes);
  LoadedModel lm = load_model(o.m);
  const auto ids = encode_input(*lm.tokenizer, text, true, false, "the text file");
  o.q.n_threads = o.m.threads;
  Progress progress("tally lab kv-quant");
  return {measure_kv_quant(*lm.model, *lm.tokenizer, ids, o.q, draw_on(progress, "scoring the text")), ids.size()};
}

void print_kv_quant(const KvQuantLabOptions& o, const KvQuantResult& res) {
  const KvQuantReport& rep = res.report;
  if (o.json) {
    nlohmann::json a = nlohmann::json::array(), g = nlohmann::json::array();
    for (const auto& r : rep.rows)
      a.push_back({{"context", r.context}, {"type", kv_cache_type_flag(r.type)}, {"windows", r.windows},
                   {"predictions", r.predictions}, {"ppl", r.ppl}, {"kl_vs_f16", r.kl_vs_f16},
                   {"kl_vs_f32", r.kl_vs_f32}, {"max_kl_vs_f16", r.max_kl_vs_f16}, {"top1_vs_f16", r.top1_vs_f16},
                   {"seconds", r.seconds}});
    for (const auto& r : rep.greedy)
      g.push_back({{"prompt", r.prompt}, {"type", kv_cache_type_flag(r.type)}, {"generated", r.generated},
                   {"agree_prefix", r.agree_prefix}});
    cli::print_json({{"text_tokens", res.text_tokens}, {"rows", a}, {"greedy", g}});
    return;
  }
  fmt::print("| context | cache | windows | predictions | perplexity | mean KL vs f16 | max KL vs f16 | mean KL vs f32 "
             "| top-1 = f16 | seconds |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rep.rows)
    fmt::print("| {} | {} | {} | {} | {:.4f} | {:.2e} | {:.2e} | {:.2e} | {:.2f}% | {:.1f} |\n", r.context,
               kv_cache_type_flag(r.type), r.windows, r.predictions, r.ppl, r.kl_vs_f16, r.max_kl_vs_f16, r.kl_vs_f32,
               100 * r.top1_vs_f16, r.seconds);
  if (!rep.greedy.empty()) {
    fmt::print("\n| prompt | cache | tokens equal to f16's before the first difference |\n|---|---|---|\n");
    for (const auto& r : rep.greedy)
      fmt::print("| {} | {} | {} of {} |\n", r.prompt, kv_cache_type_flag(r.type), r.agree_prefix, r.generated);
  }
}

void add_kv_quant(CLI::App* lab) {
  auto o = std::make_shared<KvQuantLabOptions>();
  o->q.prompts = {"The capital of France is", "Once upon a time, in a small village by the sea,",
                  "def fibonacci(n):", "Photosynthesis is the process by which"};
  auto* cmd = lab->add_subcommand(
      "kv-quant", "Quality of a quantized KV cache: perplexity, KL divergence against f16 and f32, greedy agreement");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("--text", o->text, "A long text file (public domain)")->required()->check(nonempty_path());
  cmd->add_option("--contexts", o->q.contexts, "Context lengths, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(token_count_in(2, kMaxContextTokens));
  cmd->add_option("--tokens", o->q.tokens, "Tokens scored per context (whole windows, at least one)")
      ->capture_default_str()
      ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_option("--greedy-tokens", o->q.greedy_tokens, "Tokens generated per prompt for greedy agreement")
      ->capture_default_str()
      ->transform(token_count_in(0, kMaxContextTokens));
  cmd->add_option("--prompt", o->q.prompts, "Greedy-agreement prompts (replace the built-in four)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    print_kv_quant(*o, run_kv_quant(*o));
  });
}

// ---- speculative: acceptance, tokens per step and speed against k

struct SpeculativeOptions {
  ModelOptions m;
  std::vector<std::string> tasks = {"code-edit", "chat"};
  std::vector<int64_t> ks = {1, 2, 4, 8};
  int64_t gen_tokens = 128;
  std::string draft, plot;
  int64_t draft_vocab = -1;  // -1: not given
  bool json = false, list = false;
};

void list_tasks(bool json) {
  nlohmann::json out = nlohmann::json::array();
  for (const SpeculationTask& t : speculation_tasks()) {
    if (json) out.push_back({{"name", t.name}, {"kind", t.kind}, {"prompt", t.prompt}});
    else fmt::print("{} ({}): {}\n", t.name, t.kind, t.prompt.substr(0, t.prompt.find('\n')));
  }
  if (json) cli::print_json(out, 2);
}

SpeculationReport run_speculative(const SpeculativeOptions& o) {
  LoadedModel lm = load_model(o.m);
  SpeculationExperiment e;
  e.kinds = o.tasks;
  e.ks = o.ks;
  e.gen_tokens = o.gen_tokens;
  e.n_threads = o.m.threads;
  e.cache_type = session_options(o.m, *lm.model, false).cache_type;
  LoadedModel draft;
  if (!o.draft.empty()) {
    draft = load_draft(o.m, o.draft, lm);
    e.draft = draft.model.get();
    e.draft_vocab = draft_vocab(o.draft_vocab, true);
  }
  Progress progress("tally lab speculative");
  return measure_speculation(*lm.model, *lm.tokenizer, e, draw_on(progress, "tasks x settings"));
}

std::string k_name(int64_t k) { return k == 0 ? "off" : k < 0 ? "auto" : std::to_string(k); }

void print_speculative(const SpeculativeOptions& o, const SpeculationReport& r) {
  if (!o.plot.empty()) {
    PlotSpec p{fmt::format("Speculative decoding ({}): decode speed against k", r.source), "guesses per step (k)",
               "speedup over no speculation", {}, -1, "", false};
    for (const std::string& kind : o.tasks) {
      PlotSeries s{kind, {}, {}};
      for (const SpeculationPoint& pt : r.points)
        if (pt.kind == kind && pt.k >= 0) s.x.push_back(static_cast<double>(pt.k)), s.y.push_back(r.speedup(pt));
      p.series.push_back(s);
    }
    write_plot_png(o.plot, p);
  }
  if (o.json) {
    nlohmann::json pts = nlohmann::json::array();
    for (const SpeculationPoint& pt : r.points)
      pts.push_back({{"kind", pt.kind}, {"k", k_name(pt.k)}, {"tokens", pt.tokens}, {"target_steps", pt.steps},
                     {"drafted", pt.drafted}, {"accepted", pt.accepted}, {"acceptance", pt.acceptance()},
                     {"tokens_per_step", pt.tokens_per_step()}, {"decode_tps", pt.tps()}, {"speedup", r.speedup(pt)},
                     {"rolled_back_positions", pt.rolled_back}, {"rolled_back_blocks", pt.rolled_back_blocks},
                     {"draft_rolled_back_positions", pt.draft_rolled_back}, {"same_tokens", pt.same_tokens}});
    cli::print_json({{"source", r.source}, {"gen_tokens", r.gen_tokens}, {"points", pts}}, 2);
    return;
  }
  fmt::print("speculative decoding by {}, {} tokens per task, greedy (every run must write the tokens of the run "
             "without)\n",
             r.source == "draft" ? "a draft model" : "prompt lookup", r.gen_tokens);
  fmt::print("  {:<10} {:>5} {:>10} {:>11} {:>9} {:>8} {:>13} {:>7}\n", "tasks", "k", "kept", "tok/step", "tok/s",
             "speedup", "rolled back", "same");
  for (const SpeculationPoint& pt : r.points)
    fmt::print("  {:<10} {:>5} {:>9.0f}% {:>11.2f} {:>9.1f} {:>7.2f}x {:>6} ({:>3} bl) {:>7}\n", pt.kind, k_name(pt.k),
               100 * pt.acceptance(), pt.tokens_per_step(), pt.tps(), r.speedup(pt), pt.rolled_back,
               pt.rolled_back_blocks, pt.same_tokens ? "yes" : "NO");
  for (const SpeculationPoint& pt : r.points)
    if (!pt.same_tokens) fail("speculation changed greedy tokens ({} tasks, k {}): a bug", pt.kind, k_name(pt.k));
}

void add_speculative(CLI::App* lab) {
  auto o = std::make_shared<SpeculativeOptions>();
  auto* cmd = lab->add_subcommand("speculative",
                                  "Speculative decoding on held code-edit and chat tasks: acceptance, tokens per step "
                                  "and speed against k, and what rollbacks cost the cache");
  add_lab_model_options(cmd, o->m);
  cmd->add_option("--tasks", o->tasks, "Kinds of held tasks, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"code-edit", "chat"}));
  cmd->add_option("--k", o->ks, "Guesses per step to measure (fixed), comma-separated; the adaptive length is "
                                "measured too, at most the largest")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(integer_in(1, 64));
  cmd->add_option("-n,--gen-tokens", o->gen_tokens, "Tokens generated per task")
      ->capture_default_str()
      ->transform(token_count_in(1, 4096));
  cmd->add_option("--draft", o->draft, "Guess with this draft model (same vocabulary) instead of prompt lookup");
  add_draft_vocab_option(cmd, o->draft_vocab);
  cmd->add_option("--plot", o->plot, "Write a PNG plot here")->check(output_file("plot"));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_flag("--list", o->list, "Print the held tasks (with --json: their whole prompts) and stop");
  cmd->callback([o] {
    o->m.validate();
    draft_vocab(o->draft_vocab, !o->draft.empty());
    if (o->list) return list_tasks(o->json);
    print_speculative(*o, run_speculative(*o));
  });
}

}  // namespace

void add_lab(CLI::App& app) {
  auto* lab = app.add_subcommand("lab", "The KV-cache lab: docs/lab.md's experiments on a real model");
  lab->require_subcommand(1);
  add_causal(lab);
  add_scores(lab);
  add_speedup(lab);
  add_depth(lab);
  add_continuity(lab);
  add_beam(lab);
  add_sinks(lab);
  add_kv_quant(lab);
  add_speculative(lab);
}

}  // namespace tally::cli
