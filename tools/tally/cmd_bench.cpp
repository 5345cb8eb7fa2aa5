// tally bench: prefill and decode throughput with what explains it.
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/benchmark.h"
#include "bench/machine_probe.h"
#include "commands.h"
#include "option_checks.h"
#include "output.h"
#include "core/byte_size.h"
#include "core/error.h"
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
    bool json = false, probe_only = false, no_probe = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("bench", "Prefill (pp) and decode (tg) tokens/s at given depths and thread counts");
  cmd->add_option("-m,--model", o->m.model, "GGUF model (default: the installed default model)")->check(nonempty_path());
  cmd->add_option("-p", o->n_prompt, "Prompt tokens for the pp test (0: skip)")->capture_default_str();
  cmd->add_option("-n", o->n_gen, "Generated tokens for the tg test (0: skip)")->capture_default_str();
  cmd->add_option("-d", o->depths, "Cache depths before each test, comma-separated")->delimiter(',');
  cmd->add_option("-t", o->threads, "Thread counts, comma-separated (default: all cores)")
      ->delimiter(',')
      ->transform(integer_in(1, kMaxThreads));
  cmd->add_option("-r", o->reps, "Repetitions per test")->capture_default_str();
  cmd->add_option("--cache-type", o->m.cache_type, "KV cache number format: f16 or f32")->capture_default_str();
  add_simd_options(cmd, o->m);
  cmd->add_flag("--probe", o->probe_only, "Only measure this machine's read bandwidth and FMA peak");
  cmd->add_flag("--no-probe", o->no_probe, "Skip the machine probe (no % of limits)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    if (o->threads.empty()) o->threads = {ThreadPool::default_threads()};
    for (int t : o->threads)
      if (t < 1) fail("-t values must be positive, got {}", t);
    std::vector<MachineLimits> limits;
    apply_simd_options(o->m);
    if (!o->no_probe)
      for (int t : o->threads) limits.push_back(probe_machine(t));
    nlohmann::json j;
    nlohmann::json jl = nlohmann::json::array();
    for (const auto& l : limits)
      jl.push_back({{"threads", l.threads}, {"read_gbps", l.read_gbps}, {"fma_gflops", l.fma_gflops}, {"simd", l.simd}});
    j["machine"] = jl;
    if (!o->json)
      for (const auto& l : limits)
        fmt::print("machine, {} thread(s): read {:.1f} GB/s, f32 FMA peak {:.1f} GFLOP/s ({})\n", l.threads, l.read_gbps,
                   l.fma_gflops, l.simd);
    if (o->probe_only) {
      if (o->json) print_json(j, 2);
      return;
    }
    LoadedModel lm = load_model(o->m);
    BenchOptions b;
    b.n_prompt = o->n_prompt;
    b.n_gen = o->n_gen;
    b.depths = o->depths;
    b.threads = o->threads;
    b.reps = o->reps;
    b.cache_type = session_options(o->m, *lm.model, false).cache_type;
    if (!o->json) {
      fmt::print("model {} ({}), load {:.0f} ms, kernels {}\n", lm.model->file().path(),
                 format_bytes(lm.model->weight_bytes()), lm.load_ms, simd_level_name(simd_level()));
      fmt::print("| test | threads | depth | tokens/s | stddev | bytes/token | GB/s | GFLOP/s | % of limit |\n");
      fmt::print("|---|---|---|---|---|---|---|---|---|\n");
    }
    const auto rows = run_benchmark(*lm.model, b, limits, [&](const BenchRow& r) {
      if (o->json) return;
      const bool tg = r.test[0] == 't';
      fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {} | {} | {} | {} |\n", r.test, r.threads, r.depth, r.tps_mean,
                 r.tps_stddev, tg ? fmt::format("{:.1f} MB", r.bytes_per_token / 1e6) : "",
                 tg ? fmt::format("{:.1f}", r.gbps) : "", tg ? "" : fmt::format("{:.1f}", r.gflops),
                 r.pct_limit > 0 ? fmt::format("{:.0f}% {}", r.pct_limit, tg ? "of read bandwidth" : "of FMA peak") : "");
      flush_stdout();
    });
    if (o->json) {
      nlohmann::json jr = nlohmann::json::array();
      for (const auto& r : rows)
        jr.push_back({{"test", r.test}, {"threads", r.threads}, {"depth", r.depth}, {"tps_mean", r.tps_mean},
                      {"tps_stddev", r.tps_stddev}, {"bytes_per_token", r.bytes_per_token}, {"gbps", r.gbps},
                      {"flops_per_token", r.flops_per_token}, {"gflops", r.gflops}, {"pct_limit", r.pct_limit}});
      j["load_ms"] = lm.load_ms;
      j["weight_bytes"] = lm.model->weight_bytes();
      j["simd"] = simd_level_name(simd_level());
      j["results"] = jr;
      print_json(j, 2);
    }
  });
}

}  // namespace tally::cli
