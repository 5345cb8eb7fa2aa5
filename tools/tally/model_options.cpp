#include "model_options.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/model_locator.h"
#include "kernels/cpu_features.h"
#include "kv/kv_cache.h"
#include "option_checks.h"
#include "kernels/kv_quant.h"

namespace tally::cli {

std::string model_help() {
  std::string def = "the catalog's default model";
  try {
    def = Catalog::get().default_model().name;
  } catch (const Error&) {  // a bad $TALLY_CATALOG is reported when a model is looked up, not by --help
  }
  return "Model: a GGUF file or HF folder, a name from `tally list --all` (e.g. smollm2:135m), or a file name in "
         "$TALLY_HOME/models (default: " + def + ")";
}

std::string model_path(const std::string& given) {
  const ModelLocation loc = locate_model(given);
  if (!loc.note.empty()) fmt::print(stderr, "tally: note: {}\n", loc.note);
  return loc.path;
}

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("-m,--model", o.model, model_help())->check(nonempty_path());
  cmd->add_option("-c,--ctx", o.ctx, "Context size in tokens (default: min(4096, trained context))")
      ->transform(integer_in(0, kMaxContextTokens));
  cmd->add_option("-t,--threads", o.threads, "Threads (default: all cores)")->transform(integer_in(0, kMaxThreads));
  cmd->add_option("--batch", o.batch, "Prefill chunk size in tokens")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxBatch));
  cmd->add_option("--cache-type", o.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")->capture_default_str();
  cmd->add_option("--kv-budget", o.kv_budget,
                  "Memory the KV cache may use: BYTES, or with KiB/MiB/GiB/TiB (default: available memory)");
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
    fail("--simd must be scalar, avx2, avx2+vnni or avx512+vnni, got '{}'", excerpt(o.simd));
  if (!simd_supported(level)) fail("--simd {}: this CPU does not support it", o.simd);
  set_simd_level(level);
}

LoadedModel load_model(const ModelOptions& o) {
  apply_simd_options(o);
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && o.threads > static_cast<int>(cores))
    fmt::print(stderr, "tally: warning: -t {} is more threads than the {} cores of this machine; expect it to run slower\n",
               o.threads, cores);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel l;
  l.model = Model::load(model_path(o.model));
  l.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(l.model->file()));
  if (l.tokenizer->n_vocab() < l.model->config().n_vocab)
    fail("{}: the tokenizer has {} tokens but the model has {} rows of logits: ids from {} on would have no text",
         l.model->file().path(), l.tokenizer->n_vocab(), l.model->config().n_vocab, l.tokenizer->n_vocab());
  l.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

SessionOptions session_options(const ModelOptions& o, const Model& m, bool all_logits) {
  SessionOptions s;
  const auto ct = kv_cache_type_from_flag(o.cache_type);
  if (!ct) fail("--cache-type must be {}, got '{}'", kKvCacheTypeFlags, excerpt(o.cache_type));
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
  if (!o.kv_budget.empty()) {
    s.kv_budget = parse_byte_count(o.kv_budget, "--kv-budget");
    const uint64_t available = available_memory_bytes();
    if (s.kv_budget > available)
      fmt::print(stderr, "tally: warning: --kv-budget {} is more than the {} of memory available\n",
                 format_bytes(s.kv_budget), format_bytes(available));
  }
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
