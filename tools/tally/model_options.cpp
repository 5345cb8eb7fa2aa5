#include "model_options.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "io/model_locator.h"
#include "kernels/cpu_features.h"
#include "kernels/kv_quant.h"

namespace tally::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("-m,--model", o.model, "GGUF model (default: the installed default model)");
  cmd->add_option("-c,--ctx", o.ctx, "Context size in tokens (default: min(4096, trained context))");
  cmd->add_option("-t,--threads", o.threads, "Threads (default: all cores)");
  cmd->add_option("--batch", o.batch, "Prefill chunk size in tokens")->capture_default_str();
  cmd->add_option("--cache-type", o.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")->capture_default_str();
  cmd->add_option("--kv-budget", o.kv_budget, "Bytes the KV cache may use (default: available memory)");
  add_simd_options(cmd, o);
  cmd->add_flag("--no-prefix-cache", o.no_prefix_cache,
                "Do not keep or reuse the KV blocks of earlier sequences' prompts (with several sequences)");
}

void add_simd_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_flag("--scalar", o.scalar, "Use the scalar reference kernels (no SIMD)");
  cmd->add_option("--simd", o.simd, "Kernel level: scalar, avx2, avx2+vnni or avx512+vnni (default: the best this CPU has)");
}

void apply_simd_options(const ModelOptions& o) {
  if (o.scalar) set_simd_level(SimdLevel::Scalar);
  if (o.simd.empty()) return;
  SimdLevel level;
  if (!simd_level_from_name(o.simd, level))
    fail("--simd must be scalar, avx2, avx2+vnni or avx512+vnni, got '{}'", o.simd);
  if (!simd_supported(level)) fail("--simd {}: this CPU does not support it", o.simd);
  set_simd_level(level);
}

LoadedModel load_model(const ModelOptions& o) {
  apply_simd_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel l;
  l.model = Model::load(resolve_model_path(o.model));
  l.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(l.model->file()));
  l.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

SessionOptions session_options(const ModelOptions& o, const Model& m, bool all_logits) {
  SessionOptions s;
  if (o.ctx < 0) fail("-c must be positive, got {}", o.ctx);
  if (o.threads < 0) fail("-t must be positive, got {}", o.threads);
  if (o.batch < 1) fail("--batch must be at least 1, got {}", o.batch);
  const auto ct = kv_cache_type_from_flag(o.cache_type);
  if (!ct) fail("--cache-type must be {}, got '{}'", kKvCacheTypeFlags, o.cache_type);
  s.cache_type = *ct;
  const int64_t hd = m.config().head_dim;
  if (hd % traits(*ct).block_size != 0)
    fail("--cache-type {} needs a head size that is a multiple of {}, this model has {}", o.cache_type,
         traits(*ct).block_size, hd);
  if (o.ctx > m.config().n_ctx_train)
    fmt::print(stderr, "tally: warning: -c {} exceeds the model's trained context of {}; quality may degrade\n",
               o.ctx, m.config().n_ctx_train);
  s.n_ctx = o.ctx;
  s.n_threads = o.threads;
  s.n_batch = o.batch;
  s.all_logits = all_logits;
  s.kv_budget = o.kv_budget;
  return s;
}

EngineOptions engine_options(const ModelOptions& o, const Model& m) {
  const SessionOptions s = session_options(o, m, false);
  EngineOptions e;
  e.n_ctx = s.n_ctx;
  e.n_threads = s.n_threads;
  e.step_tokens = s.n_batch;
  e.cache_type = s.cache_type;
  e.kv_budget = s.kv_budget;
  e.prefix_cache = !o.no_prefix_cache;
  return e;
}

}  // namespace tally::cli
