// tally bench: prefill and decode throughput with what explains it.
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/attention_bench.h"
#include "bench/benchmark.h"
#include "bench/parallel_bench.h"
#include "bench/machine_probe.h"
#include "bench/progress.h"
#include "commands.h"
#include "option_checks.h"
#include "output.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kv/kv_shape.h"
#include "model_options.h"
#include "core/thread_pool.h"

namespace tally::cli {

void add_bench(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    int64_t n_prompt = 512, n_gen = 128;
    std::vector<int64_t> depths{0};
    std::vector<int> threads;
    int reps = 3;
    bool json = false, probe_only = false, no_probe = false, no_warmup = false;
    std::vector<int64_t> parallel;
    int64_t batch = 512, ttft = 0;
    bool attention = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("bench", "Prefill (pp) and decode (tg) tokens/s at given depths and thread counts");
  cmd->add_option("-m,--model", o->m.model, model_help())->check(nonempty_path());
  cmd->add_option("-p", o->n_prompt, "Prompt tokens for the pp test (0: skip)")->capture_default_str();
  cmd->add_option("-n", o->n_gen, "Generated tokens for the tg test (0: skip)")->capture_default_str();
  auto* depths = cmd->add_option("-d", o->depths, "Cache depths before each test, comma-separated")->delimiter(',');
  cmd->add_option("-t", o->threads, "Thread counts, comma-separated (default: all cores)")
      ->delimiter(',')
      ->transform(integer_in(1, kMaxThreads));
  cmd->add_option("-r", o->reps, "Repetitions per test")->capture_default_str();
  cmd->add_option("--cache-type", o->m.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")->capture_default_str();
  add_simd_options(cmd, o->m);
  cmd->add_flag("--probe", o->probe_only,
                "Only measure this machine's read bandwidth, f32 FMA peak and int8 dot-product peak");
  cmd->add_flag("--no-warmup", o->no_warmup, "Skip the untimed warmup run before each test");
  cmd->add_flag("--no-probe", o->no_probe, "Skip the machine probe (no % of limits)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--parallel", o->parallel,
                  "Sequence counts, comma-separated: N prompts of -p tokens prefilled together, then N sequences "
                  "decoding -n tokens together (aggregate tokens/s, time per step)")
      ->delimiter(',');
  cmd->add_option("--batch", o->batch, "Token budget of one step with --parallel")->capture_default_str();
  cmd->add_flag("--attention", o->attention,
                "Time the attention kernels alone, one thread, in CPU time: a decode step's attention at each -d "
                "(default 8000) on a cache of the model's shape and --cache-type, 64 queries x 2048 keys one at a time, "
                "and the prefill path: 64 causal queries after 2048 keys");
  cmd->add_option("--ttft", o->ttft,
                  "Time to first token of a -p token prompt, cold and with its first N tokens in the prefix cache");
  cmd->callback([o, depths] {
    if (o->threads.empty()) o->threads = {ThreadPool::default_threads()};
    for (int t : o->threads)
      if (t < 1) fail("-t values must be positive, got {}", t);
    for (int64_t n : o->parallel)
      if (n < 1) fail("--parallel values must be at least 1, got {}", n);
    if (o->attention && (!o->parallel.empty() || o->ttft > 0 || o->probe_only))
      fail("--attention times the attention kernels alone: not with --parallel, --ttft or --probe");
    if (!o->parallel.empty() && (o->n_prompt < 1 || o->n_gen < 1))
      fail("--parallel needs -p and -n of at least 1 (got -p {} -n {})", o->n_prompt, o->n_gen);
    std::vector<MachineLimits> limits;
    apply_simd_options(o->m);
    Progress progress("tally bench");
    if (!o->no_probe)
      for (size_t i = 0; i < o->threads.size(); ++i) {
        progress.update(fmt::format("probing the machine, {} thread(s)", o->threads[i]), static_cast<double>(i),
                        static_cast<double>(o->threads.size()));
        limits.push_back(probe_machine(o->threads[i]));
      }
    progress.clear();
    nlohmann::json j;
    nlohmann::json jl = nlohmann::json::array();
    for (const auto& l : limits)
      jl.push_back({{"threads", l.threads}, {"read_gbps", l.read_gbps}, {"fma_gflops", l.fma_gflops},
                    {"int8_gops", l.int8_gops}, {"int8_kind", l.int8_kind}, {"simd", l.simd}});
    j["machine"] = jl;
    if (!o->json)
      for (const auto& l : limits)
        fmt::print("machine, {} thread(s): read {:.1f} GB/s, f32 FMA peak {:.1f} GFLOP/s, int8 peak {:.1f} GOP/s ({}; {})\n",
                   l.threads, l.read_gbps, l.fma_gflops, l.int8_gops, l.simd, l.int8_kind);
    if (o->probe_only) {
      if (o->json) print_json(j, 2);
      return;
    }
    LoadedModel lm = load_model(o->m);
    auto draw = [&](std::string_view what, int64_t done, int64_t total) {
      progress.update(what, static_cast<double>(done), static_cast<double>(total));
    };
    if (o->attention) {
      const auto& c = lm.model->config();
      AttentionBenchOptions ab;
      ab.shape = {c.n_layer, c.n_kv_head, c.head_dim};
      ab.n_head = c.n_head;
      ab.cache_type = session_options(o->m, *lm.model, false).cache_type;
      if (depths->count()) ab.depths = o->depths;
      ab.reps = o->reps;
      const AttentionBenchResult r = run_attention_benchmark(ab);
      if (o->json) {
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
        fmt::print("| decode step's attention at depth {} ({} layers x {} kv heads) | {:.2f} |\n", row.depth,
                   c.n_layer, c.n_kv_head, row.decode_ms);
      fmt::print("| {} queries x {} keys, one layer | {:.2f} |\n", ab.prefill_queries, ab.prefill_keys, r.prefill_ms);
      fmt::print("| prefill path: {} causal queries after {} keys, {} at a time, one layer | {:.2f} |\n",
                 ab.prefill_queries, ab.prefill_keys, kAttentionTokens, r.prefill_path_ms);
      return;
    }
    if (o->ttft > 0) {
      nlohmann::json jr = nlohmann::json::array();
      if (!o->json) {
        fmt::print("| threads | prompt | cached prefix | cold ms | warm ms | warm / cold |\n|---|---|---|---|---|---|\n");
      }
      for (int t : o->threads) {
        const PrefixHitRow r = measure_prefix_hit(*lm.model, o->n_prompt, o->ttft, t, o->reps);
        if (o->json) {
          jr.push_back({{"threads", r.threads}, {"n_prompt", r.n_prompt}, {"cached", r.cached},
                        {"hit_tokens", r.hit_tokens}, {"cold_ms", r.cold_ms}, {"warm_ms", r.warm_ms}});
        } else {
          fmt::print("| {} | {} | {} (hit {}) | {:.1f} | {:.1f} | {:.1f}% |\n", r.threads, r.n_prompt, r.cached,
                     r.hit_tokens, r.cold_ms, r.warm_ms, 100 * r.warm_ms / r.cold_ms);
        }
      }
      if (o->json) {
        j["ttft_results"] = jr;
        print_json(j, 2);
      }
      return;
    }
    if (!o->parallel.empty()) {
      ParallelBenchOptions pb;
      pb.n_prompt = o->n_prompt;
      pb.n_gen = o->n_gen;
      pb.parallel = o->parallel;
      pb.threads = o->threads;
      pb.reps = o->reps;
      pb.step_tokens = o->batch;
      pb.cache_type = session_options(o->m, *lm.model, false).cache_type;
      if (!o->json) {
        fmt::print("model {} ({}), kernels {}; prompts of {} tokens, {} generated each\n", lm.model->file().path(),
                   format_bytes(lm.model->weight_bytes()), simd_level_name(simd_level()), pb.n_prompt, pb.n_gen);
        fmt::print("| threads | sequences | prefill tokens/s | decode tokens/s (all) | per sequence tokens/s | ms per step | peak K/V |\n");
        fmt::print("|---|---|---|---|---|---|---|\n");
      }
      const auto prow = run_parallel_benchmark(
          *lm.model, pb,
          [&](const ParallelBenchRow& r) {
            if (o->json) return;
            progress.clear();
            fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {} |\n", r.threads, r.parallel, r.prefill_tps,
                       r.decode_tps, r.decode_tps / static_cast<double>(r.parallel), r.ms_per_step,
                       format_bytes(r.peak_kv_bytes));
            flush_stdout();
          },
          draw);
      progress.clear();
      if (o->json) {
        nlohmann::json jr = nlohmann::json::array();
        for (const auto& r : prow)
          jr.push_back({{"threads", r.threads}, {"parallel", r.parallel}, {"prefill_tps", r.prefill_tps},
                        {"decode_tps", r.decode_tps}, {"ms_per_step", r.ms_per_step},
                        {"peak_kv_bytes", r.peak_kv_bytes}});
        j["n_prompt"] = pb.n_prompt;
        j["n_gen"] = pb.n_gen;
        j["simd"] = simd_level_name(simd_level());
        j["parallel_results"] = jr;
        print_json(j, 2);
      }
      return;
    }
    BenchOptions b;
    b.n_prompt = o->n_prompt;
    b.n_gen = o->n_gen;
    b.depths = o->depths;
    b.threads = o->threads;
    b.reps = o->reps;
    b.warmup = !o->no_warmup;
    b.cache_type = session_options(o->m, *lm.model, false).cache_type;
    if (!o->json) {
      fmt::print("model {} ({}), load {:.0f} ms, kernels {}\n", lm.model->file().path(),
                 format_bytes(lm.model->weight_bytes()), lm.load_ms, simd_level_name(simd_level()));
      fmt::print("| test | threads | depth | tokens/s | stddev | bytes/token | GB/s | GFLOP/s | int8 GOP/s | % of limit |\n");
      fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
    }
    auto limit_text = [](const BenchRow& r) -> std::string {
      if (r.test[0] == 't') return r.pct_limit > 0 ? fmt::format("{:.0f}% of read bandwidth", r.pct_limit) : "";
      std::string s = r.pct_limit > 0 ? fmt::format("{:.0f}% of FMA peak", r.pct_limit) : "";
      if (r.pct_int8_peak > 0) s += fmt::format("{}{:.0f}% of int8 peak", s.empty() ? "" : ", ", r.pct_int8_peak);
      return s;
    };
    const auto rows = run_benchmark(
        *lm.model, b, limits,
        [&](const BenchRow& r) {
          if (o->json) return;
          progress.clear();
          const bool tg = r.test[0] == 't';
          fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {} | {} | {} | {} | {} |\n", r.test, r.threads, r.depth,
                     r.tps_mean, r.tps_stddev, tg ? fmt::format("{:.1f} MB", r.bytes_per_token / 1e6) : "",
                     tg ? fmt::format("{:.1f}", r.gbps) : "", tg ? "" : fmt::format("{:.1f}", r.gflops),
                     tg ? "" : fmt::format("{:.1f}", r.int8_gops), limit_text(r));
          flush_stdout();
        },
        draw);
    progress.clear();
    if (o->json) {
      nlohmann::json jr = nlohmann::json::array();
      for (const auto& r : rows)
        jr.push_back({{"test", r.test}, {"threads", r.threads}, {"depth", r.depth}, {"tps_mean", r.tps_mean},
                      {"tps_stddev", r.tps_stddev}, {"bytes_per_token", r.bytes_per_token}, {"gbps", r.gbps},
                      {"flops_per_token", r.flops_per_token}, {"gflops", r.gflops}, {"pct_limit", r.pct_limit},
                      {"int8_ops_per_token", r.int8_ops_per_token}, {"int8_gops", r.int8_gops},
                      {"pct_int8_peak", r.pct_int8_peak}});
      j["load_ms"] = lm.load_ms;
      j["weight_bytes"] = lm.model->weight_bytes();
      j["simd"] = simd_level_name(simd_level());
      j["results"] = jr;
      print_json(j, 2);
    }
  });
}

}  // namespace tally::cli
