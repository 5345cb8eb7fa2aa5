// tally bench: prefill and decode throughput with what explains it. Modes:
// the machine probe alone (--probe), the attention kernels alone
// (--attention), time to first token with a cached prefix (--ttft), many
// sequences at once (--parallel), and llama-bench's pp/tg table (the default).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "bench/attention_bench.h"
#include "bench/benchmark.h"
#include "bench/machine_probe.h"
#include "bench/parallel_bench.h"
#include "bench/progress.h"
#include "commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kv/kv_shape.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "usage.h"

namespace tally::cli {

namespace {

struct BenchArgs {
  ModelOptions m;
  int64_t n_prompt = 512, n_gen = 128;
  std::vector<int64_t> depths{0};
  std::vector<int64_t> threads;
  int64_t reps = 3;
  bool json = false, probe_only = false, no_probe = false, no_warmup = false;
  std::vector<int64_t> parallel;
  int64_t batch = 512, ttft = 0;
  bool attention = false;
  struct Given {
    bool depths = false, batch = false, ttft = false, prompt = false, gen = false;
  } given;

  void validate() const;
};

void BenchArgs::validate() const {
  m.validate();
  const bool par = !parallel.empty();
  if (attention && (par || given.ttft || probe_only))
    usage_fail("--attention times the attention kernels alone: not with --parallel, --ttft or --probe");
  if (given.ttft && (par || probe_only)) usage_fail("--ttft is a benchmark of its own: not with --parallel or --probe");
  if (par && probe_only) usage_fail("--probe measures the machine alone: not with --parallel");
  if (probe_only && (given.prompt || given.gen || given.depths))
    usage_fail("--probe measures the machine alone: -p, -n and -d are for the model's benchmarks");
  if (given.batch && !par) usage_fail("--batch is the token budget of a step with --parallel: give --parallel N,...");
  if (par && (n_prompt < 1 || n_gen < 1))
    usage_fail("--parallel needs -p and -n of at least 1 (got -p {} -n {})", n_prompt, n_gen);
  if (given.ttft && ttft >= n_prompt)
    usage_fail("--ttft {} must be below -p {} (the prompt's first N tokens are cached, the rest prefilled)", ttft,
               n_prompt);
  if (attention)
    for (int64_t d : depths)
      if (d < 1 && given.depths) usage_fail("-d values must be at least 1 with --attention, got {}", d);
  if (!attention && !par && !given.ttft && !probe_only && n_prompt == 0 && n_gen == 0)
    usage_fail("-p 0 and -n 0 leave nothing to measure");
}

// The model's columns, as llama-bench prints them.
struct ModelColumns {
  std::string name;
  uint64_t bytes = 0;
  uint64_t params = 0;
};

ModelColumns model_columns(const LoadedModel& lm) {
  ModelColumns c{lm.name, lm.model->weight_bytes(), 0};
  for (const auto& t : lm.model->file().tensors()) c.params += t.n_elements;
  return c;
}

// "135.0M", "1.54B": llama-bench's params column.
std::string count_text(uint64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  return fmt::format("{}", n);
}

// The benchmarks' progress(what, done, total) drawn on `p` (stderr, terminals only).
auto draw_on(Progress& p) {
  return [&p](std::string_view what, int64_t done, int64_t total) {
    p.update(what, static_cast<double>(done), static_cast<double>(total));
  };
}

std::vector<int> thread_counts(const BenchArgs& o) {
  if (o.threads.empty()) return {ThreadPool::default_threads()};
  return std::vector<int>(o.threads.begin(), o.threads.end());
}

nlohmann::json machine_json(const std::vector<MachineLimits>& limits) {
  nlohmann::json jl = nlohmann::json::array();
  for (const auto& l : limits)
    jl.push_back({{"threads", l.threads}, {"read_gbps", l.read_gbps}, {"fma_gflops", l.fma_gflops},
                  {"int8_gops", l.int8_gops}, {"int8_kind", l.int8_kind}, {"simd", l.simd}});
  return jl;
}

std::vector<MachineLimits> probe(const BenchArgs& o, Progress& progress) {
  std::vector<MachineLimits> limits;
  if (o.no_probe) return limits;
  const std::vector<int> ts = thread_counts(o);
  for (size_t i = 0; i < ts.size(); ++i) {
    progress.update(fmt::format("probing the machine, {} thread(s)", ts[i]), static_cast<double>(i),
                    static_cast<double>(ts.size()));
    limits.push_back(probe_machine(ts[i]));
  }
  progress.clear();
  return limits;
}

void print_machine(const std::vector<MachineLimits>& limits) {
  for (const auto& l : limits)
    fmt::print("machine, {} thread(s): read {:.1f} GB/s, f32 FMA peak {:.1f} GFLOP/s, int8 peak {:.1f} GOP/s ({}; {})\n",
               l.threads, l.read_gbps, l.fma_gflops, l.int8_gops, l.simd, l.int8_kind);
}

// ---- --attention

void attention(const BenchArgs& o, const LoadedModel& lm, nlohmann::json& j) {
  const auto& c = lm.model->config();
  AttentionBenchOptions ab;
  ab.shape = {c.n_layer, c.n_kv_head, c.head_dim};
  ab.n_head = c.n_head;
  ab.cache_type = session_options(o.m, *lm.model, false).cache_type;
  if (o.given.depths) ab.depths = o.depths;
  ab.reps = static_cast<int>(o.reps);
  const AttentionBenchResult r = run_attention_benchmark(ab);
  if (o.json) {
    nlohmann::json jr = nlohmann::json::array();
    for (const auto& row : r.decode) jr.push_back({{"depth", row.depth}, {"decode_attention_ms", row.decode_ms}});
    j["attention"] = {{"cache_type", dtype_name(ab.cache_type)}, {"kernels", simd_level_name(simd_level())},
                      {"decode", jr}, {"prefill_queries", ab.prefill_queries}, {"prefill_keys", ab.prefill_keys},
                      {"prefill_ms", r.prefill_ms}, {"prefill_path_ms", r.prefill_path_ms}};
    print_json(j, 2);
    return;
  }
  fmt::print("attention kernels alone, cache {}, kernels {}, 1 thread, CPU ms, median of {}\n",
             dtype_name(ab.cache_type), simd_level_name(simd_level()), ab.reps);
  fmt::print("| test | ms |\n|---|---|\n");
  for (const auto& row : r.decode)
    fmt::print("| decode step's attention at depth {} ({} layers x {} kv heads) | {:.2f} |\n", row.depth, c.n_layer,
               c.n_kv_head, row.decode_ms);
  fmt::print("| {} queries x {} keys, one layer | {:.2f} |\n", ab.prefill_queries, ab.prefill_keys, r.prefill_ms);
  fmt::print("| prefill path: {} causal queries after {} keys, {} at a time, one layer | {:.2f} |\n",
             ab.prefill_queries, ab.prefill_keys, kAttentionTokens, r.prefill_path_ms);
}

// ---- --ttft

void ttft(const BenchArgs& o, const LoadedModel& lm, nlohmann::json& j) {
  std::vector<PrefixHitRow> rows;
  for (int t : thread_counts(o))
    rows.push_back(measure_prefix_hit(*lm.model, o.n_prompt, o.ttft, t, static_cast<int>(o.reps)));
  if (o.json) {
    nlohmann::json jr = nlohmann::json::array();
    for (const auto& r : rows)
      jr.push_back({{"threads", r.threads}, {"n_prompt", r.n_prompt}, {"cached", r.cached}, {"hit_tokens", r.hit_tokens},
                    {"cold_ms", r.cold_ms}, {"warm_ms", r.warm_ms}});
    j["ttft_results"] = jr;
    print_json(j, 2);
    return;
  }
  fmt::print("| threads | prompt | cached prefix | cold ms | warm ms | warm / cold |\n|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    fmt::print("| {} | {} | {} (hit {}) | {:.1f} | {:.1f} | {:.1f}% |\n", r.threads, r.n_prompt, r.cached, r.hit_tokens,
               r.cold_ms, r.warm_ms, 100 * r.warm_ms / r.cold_ms);
}

// ---- --parallel

void parallel(const BenchArgs& o, const LoadedModel& lm, Progress& progress, nlohmann::json& j) {
  ParallelBenchOptions pb;
  pb.n_prompt = o.n_prompt;
  pb.n_gen = o.n_gen;
  pb.parallel = o.parallel;
  pb.threads = thread_counts(o);
  pb.reps = static_cast<int>(o.reps);
  pb.step_tokens = o.batch;
  pb.cache_type = session_options(o.m, *lm.model, false).cache_type;
  const ModelColumns mc = model_columns(lm);
  if (!o.json) {
    fmt::print("model {} ({}, {} parameters), kernels {}; prompts of {} tokens, {} generated each\n", mc.name,
               format_bytes_short(mc.bytes), count_text(mc.params), simd_level_name(simd_level()), pb.n_prompt,
               pb.n_gen);
    fmt::print("| threads | sequences | prefill tokens/s | decode tokens/s (all) | per sequence tokens/s | ms per step | peak K/V |\n");
    fmt::print("|---|---|---|---|---|---|---|\n");
  }
  const auto rows = run_parallel_benchmark(
      *lm.model, pb,
      [&](const ParallelBenchRow& r) {
        if (o.json) return;
        progress.clear();
        fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {} |\n", r.threads, r.parallel, r.prefill_tps,
                   r.decode_tps, r.decode_tps / static_cast<double>(r.parallel), r.ms_per_step,
                   format_bytes(r.peak_kv_bytes));
        flush_stdout();
      },
      draw_on(progress));
  progress.clear();
  if (!o.json) return;
  nlohmann::json jr = nlohmann::json::array();
  for (const auto& r : rows)
    jr.push_back({{"threads", r.threads}, {"parallel", r.parallel}, {"prefill_tps", r.prefill_tps},
                  {"decode_tps", r.decode_tps}, {"ms_per_step", r.ms_per_step}, {"peak_kv_bytes", r.peak_kv_bytes}});
  j["model"] = {{"name", mc.name}, {"bytes", mc.bytes}, {"params", mc.params}};
  j["n_prompt"] = pb.n_prompt;
  j["n_gen"] = pb.n_gen;
  j["simd"] = simd_level_name(simd_level());
  j["parallel_results"] = jr;
  print_json(j, 2);
}

// ---- pp / tg

void pp_tg(const BenchArgs& o, const LoadedModel& lm, const std::vector<MachineLimits>& limits, Progress& progress,
           nlohmann::json& j) {
  BenchOptions b;
  b.n_prompt = o.n_prompt;
  b.n_gen = o.n_gen;
  b.depths = o.depths;
  b.threads = thread_counts(o);
  b.reps = static_cast<int>(o.reps);
  b.warmup = !o.no_warmup;
  b.cache_type = session_options(o.m, *lm.model, false).cache_type;
  const ModelColumns mc = model_columns(lm);
  const bool one_rep = o.reps == 1;
  if (!o.json) {
    fmt::print("load {:.0f} ms, kernels {}{}\n", lm.load_ms, simd_level_name(simd_level()),
               one_rep ? "; one repetition (no stddev)" : "");
    fmt::print("| model | size | params | test | threads | depth | tokens/s |{} bytes/token | GB/s | GFLOP/s | int8 GOP/s | % of limit |\n",
               one_rep ? "" : " stddev |");
    fmt::print("|---|---|---|---|---|---|---|{}---|---|---|---|---|\n", one_rep ? "" : "---|");
  }
  const auto rows = run_benchmark(
      *lm.model, b, limits,
      [&](const BenchRow& r) {
        if (o.json) return;
        progress.clear();
        const bool tg = r.test[0] == 't';
        fmt::print("| {} | {} | {} | {} | {} | {} | {:.1f} |{} {} | {} | {} | {} | {} |\n", mc.name,
                   format_bytes_short(mc.bytes), count_text(mc.params), r.test, r.threads, r.depth, r.tps_mean,
                   one_rep ? "" : fmt::format(" {:.1f} |", r.tps_stddev),
                   tg ? fmt::format("{:.1f} MB", r.bytes_per_token / 1e6) : "", tg ? fmt::format("{:.1f}", r.gbps) : "",
                   tg ? "" : fmt::format("{:.1f}", r.gflops), tg ? "" : fmt::format("{:.1f}", r.int8_gops),
                   limit_summary(r));
        flush_stdout();
      },
      draw_on(progress));
  progress.clear();
  if (!o.json) return;
  nlohmann::json jr = nlohmann::json::array();
  for (const auto& r : rows)
    jr.push_back({{"test", r.test}, {"threads", r.threads}, {"depth", r.depth}, {"tps_mean", r.tps_mean},
                  {"tps_stddev", one_rep ? nlohmann::json(nullptr) : nlohmann::json(r.tps_stddev)},
                  {"bytes_per_token", r.bytes_per_token}, {"gbps", r.gbps}, {"flops_per_token", r.flops_per_token},
                  {"gflops", r.gflops}, {"pct_limit", r.pct_limit}, {"int8_ops_per_token", r.int8_ops_per_token},
                  {"int8_gops", r.int8_gops}, {"pct_int8_peak", r.pct_int8_peak}});
  j["model"] = {{"name", mc.name}, {"bytes", mc.bytes}, {"params", mc.params}};
  j["load_ms"] = lm.load_ms;
  j["weight_bytes"] = mc.bytes;
  j["simd"] = simd_level_name(simd_level());
  j["reps"] = o.reps;
  j["results"] = jr;
  print_json(j, 2);
}

void execute(const BenchArgs& o) {
  apply_simd_options(o.m);
  // The model first: a missing or broken one fails before the probe's seconds.
  std::unique_ptr<LoadedModel> lm;
  if (!o.probe_only) lm = std::make_unique<LoadedModel>(load_model(o.m));
  Progress progress("tally bench");
  const std::vector<MachineLimits> limits = probe(o, progress);
  nlohmann::json j;
  j["machine"] = machine_json(limits);
  if (!o.json) print_machine(limits);
  if (o.probe_only) {
    if (o.json) print_json(j, 2);
    return;
  }
  if (o.attention) return attention(o, *lm, j);
  if (o.given.ttft) return ttft(o, *lm, j);
  if (!o.parallel.empty()) return parallel(o, *lm, progress, j);
  pp_tg(o, *lm, limits, progress, j);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Prefill (pp) and decode (tg) tokens/s at given depths and thread counts");
  add_model_options(cmd, o->m, kModel | kSimd | kGpuLayers);
  auto* p = cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for the pp test (0: skip)")
                ->capture_default_str()
                ->transform(token_count_in(0, kMaxContextTokens));
  auto* n = cmd->add_option("-n,--n-gen", o->n_gen, "Generated tokens for the tg test (0: skip)")
                ->capture_default_str()
                ->transform(token_count_in(0, kMaxContextTokens));
  auto* depths = cmd->add_option("-d,--n-depth", o->depths, "Cache depths before each test, comma-separated")
                     ->delimiter(',')
                     ->transform(token_count_in(0, kMaxContextTokens));
  cmd->add_option("-t,--threads", o->threads, "Thread counts, comma-separated (default: all cores)")
      ->delimiter(',')
      ->transform(integer_in(1, kMaxThreads));
  cmd->add_option("-r,--repetitions", o->reps, "Repetitions per test")
      ->capture_default_str()
      ->transform(integer_in(1, 1000));
  cmd->add_option("--cache-type", o->m.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")
      ->capture_default_str()
      ->check(one_of({"f16", "f32", "q8_0", "q4_0"}));
  auto* probe_only = cmd->add_flag("--probe", o->probe_only,
                                   "Only measure this machine's read bandwidth, f32 FMA peak and int8 dot-product peak");
  cmd->add_flag("--no-warmup", o->no_warmup, "Skip the untimed warmup run before each test");
  cmd->add_flag("--no-probe", o->no_probe, "Skip the machine probe (no % of limits)")->excludes(probe_only);
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--parallel", o->parallel,
                  "Sequence counts, comma-separated: N prompts of -p tokens prefilled together, then N sequences "
                  "decoding -n tokens together (aggregate tokens/s, time per step)")
      ->delimiter(',')
      ->transform(integer_in(1, kMaxParallel));
  auto* batch = cmd->add_option("--batch", o->batch, "Token budget of one step with --parallel")
                    ->capture_default_str()
                    ->transform(integer_in(1, kMaxBatch));
  cmd->add_flag("--attention", o->attention,
                "Time the attention kernels alone, one thread, in CPU time: a decode step's attention at each -d "
                "(default 8000) on a cache of the model's shape and --cache-type, 64 queries x 2048 keys one at a time, "
                "and the prefill path: 64 causal queries after 2048 keys");
  auto* ttft = cmd->add_option("--ttft", o->ttft,
                               "Time to first token of a -p token prompt, cold and with its first N tokens in the "
                               "prefix cache")
                   ->transform(token_count_in(1, kMaxContextTokens));
  cmd->callback([o, depths, batch, ttft, p, n] {
    o->given = {depths->count() > 0, batch->count() > 0, ttft->count() > 0, p->count() > 0, n->count() > 0};
    o->validate();
    execute(*o);
  });
}

}  // namespace tally::cli
