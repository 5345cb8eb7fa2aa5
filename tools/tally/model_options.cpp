#include "model_options.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/model_locator.h"
#include "kernels/cpu_features.h"
#include "kv/kv_cache.h"
#include "option_checks.h"
#include "usage.h"
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

std::string model_name(const std::string& given, const std::string& path) {
  const Catalog& c = Catalog::get();
  const CatalogModel* m = given.empty() ? &c.default_model() : c.find(given);
  // A catalog name names that model only when -m resolved to its file (a path of the same spelling wins).
  if (m != nullptr && std::filesystem::path(path).filename() == m->file) return m->name;
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  std::string stem = p.filename().string();
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".gguf") == 0) stem.resize(stem.size() - 5);
  return stem;
}

void ModelOptions::validate() const {
  if (scalar && !simd.empty()) usage_fail("--scalar and --simd {} do not go together (--scalar is --simd scalar)", simd);
}

std::vector<std::string> simd_names() { return {"scalar", "avx2", "avx2+vnni", "avx512+vnni"}; }

void add_model_options(CLI::App* cmd, ModelOptions& o, unsigned flags, const std::string& ctx_help) {
  if (flags & kModel) cmd->add_option("-m,--model", o.model, model_help())->check(nonempty_path());
  if (flags & kContext)
    cmd->add_option("-c,--ctx,--ctx-size", o.ctx, ctx_help)->transform(token_count_in(0, kMaxContextTokens));
  if (flags & kThreads)
    cmd->add_option("-t,--threads", o.threads, "Threads (default: all cores)")->transform(integer_in(0, kMaxThreads));
  if (flags & kCache) {
    cmd->add_option("-b,--batch,--batch-size", o.batch, "Prefill chunk size in tokens")
        ->capture_default_str()
        ->transform(integer_in(1, kMaxBatch));
    cmd->add_option("--cache-type", o.cache_type, "KV cache number format: f16, f32, q8_0 or q4_0")
        ->capture_default_str()
        ->check(one_of({"f16", "f32", "q8_0", "q4_0"}));
    cmd->add_option("--kv-budget", o.kv_budget,
                    "Memory the KV cache may use: BYTES, or with a unit (KB, MB, GB or KiB, MiB, GiB; e.g. 2GiB) "
                    "(default: available memory)")
        ->check(byte_count_in("--kv-budget", 1, UINT64_MAX));
  }
  if (flags & kSimd) {
    cmd->add_flag("--scalar", o.scalar, "Use the scalar reference kernels (no SIMD)");
    cmd->add_option("--simd", o.simd, "Kernel level: scalar, avx2, avx2+vnni or avx512+vnni (default: the best this CPU has)")
        ->check(one_of(simd_names()));
  }
  if (flags & kPrefixCache)
    cmd->add_flag("--no-prefix-cache", o.no_prefix_cache,
                  "Do not keep or reuse the KV blocks of earlier sequences' prompts (with several sequences)");
  if (flags & kDiskCache) {
    cmd->add_option("--cache-dir", o.cache_dir,
                    "Keep the prefix cache's KV blocks in this folder too, so that a prompt's cached prefix "
                    "outlives the process (created if missing; see `tally cache`)")
        ->check(nonempty_path());
    cmd->add_option("--cache-disk-budget", o.cache_disk_budget,
                    "Bytes the --cache-dir blocks may take: BYTES, or with a unit (e.g. 20GiB) (default: 10GiB)")
        ->check(byte_count_in("--cache-disk-budget", 1, UINT64_MAX));
  }
  if (flags & kGpuLayers)
    cmd->add_option("--n-gpu-layers,--gpu-layers", o.gpu_layers,
                    "llama.cpp's -ngl, accepted: tally runs on the CPU, and a note says so");
}

void apply_simd_options(const ModelOptions& o) {
  if (o.scalar) set_simd_level(SimdLevel::Scalar);
  if (o.simd.empty()) return;
  SimdLevel level;
  if (!simd_level_from_name(o.simd, level))
    usage_fail("--simd must be scalar, avx2, avx2+vnni or avx512+vnni, got '{}'", excerpt(o.simd));
  if (!simd_supported(level)) fail("--simd {}: this CPU does not support it", o.simd);
  set_simd_level(level);
}

LoadedModel load_model(const ModelOptions& o) {
  o.validate();
  if (!o.gpu_layers.empty())
    fmt::print(stderr, "tally: note: tally runs on the CPU; --n-gpu-layers {} has nothing to offload\n",
               excerpt(o.gpu_layers));
  apply_simd_options(o);
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && o.threads > static_cast<int>(cores))
    fmt::print(stderr, "tally: warning: -t {} is more threads than the {} cores of this machine; expect it to run slower\n",
               o.threads, cores);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel l;
  const std::string path = model_path(o.model);
  l.name = model_name(o.model, path);
  l.model = Model::load(path);
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
  if (!ct) usage_fail("--cache-type must be {}, got '{}'", kKvCacheTypeFlags, excerpt(o.cache_type));
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
  s.disk.dir = o.cache_dir;
  if (!o.cache_disk_budget.empty()) {
    if (o.cache_dir.empty()) usage_fail("--cache-disk-budget needs --cache-dir");
    s.disk.budget_bytes = parse_byte_count(o.cache_disk_budget, "--cache-disk-budget");
  }
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
  EngineOptions e = session_engine_options(session_options(o, m, false));
  e.max_sequences = EngineOptions{}.max_sequences;
  e.prefix_cache = !o.no_prefix_cache;
  if (!e.prefix_cache && !o.cache_dir.empty()) usage_fail("--cache-dir needs the prefix cache (drop --no-prefix-cache)");
  return e;
}

namespace {

template <typename F>
auto naming_flags(F&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    fail("{} (-c sets the context, --kv-budget the memory budget, --cache-type the cache's number format, --batch "
         "the batch, --cache-dir the cache folder)",
         e.what());
  }
}

}  // namespace

std::unique_ptr<Session> open_session(const Model& m, const SessionOptions& so) {
  return naming_flags([&] { return std::make_unique<Session>(m, so); });
}

std::unique_ptr<Engine> open_engine(const Model& m, const EngineOptions& eo) {
  return naming_flags([&] { return std::make_unique<Engine>(m, eo); });
}

}  // namespace tally::cli
