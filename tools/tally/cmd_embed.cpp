// tally embed: hidden states of one cache-free pass (the text-encoder use).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "kv/kv_storage.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "runtime/embedder.h"
#include "usage.h"

namespace tally::cli {

namespace {

struct EmbedOptions {
  ModelOptions m;
  std::string prompt, pool = "mean";
  int64_t layer = -1;
  bool json = false;
};

struct EmbedResult {
  size_t tokens = 0;
  int64_t layer = 0;
  std::string pool;
  Embedding e;
};

EmbedResult embed_prompt(const EmbedOptions& o) {
  LoadedModel lm = load_model(o.m);
  const auto& c = lm.model->config();
  if (o.layer > c.n_layer)
    usage_fail("--layer {} is past the last block: this model has {} (0: the token embeddings)", o.layer, c.n_layer);
  const auto ids = encode_input(*lm.tokenizer, o.prompt, true, true, "the prompt");
  // One pass over every position at once: its work grows with the square of the length.
  const int64_t limit = o.m.ctx > 0 ? o.m.ctx : c.n_ctx_train;
  if (static_cast<int64_t>(ids.size()) > limit)
    fail("the prompt has {} tokens, more than the context of {} ({}); embed less text", ids.size(), limit,
         o.m.ctx > 0 ? "-c" : "the model's trained context; -c raises it");
  EmbedResult r;
  r.tokens = ids.size();
  r.layer = o.layer < 0 ? c.n_layer : o.layer;
  r.pool = o.pool;
  r.e = embed(*lm.model, ids, o.layer, pooling_from_name(o.pool), o.m.threads);
  return r;
}

void print_json(const EmbedResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t i = 0; i < r.e.rows; ++i)
    rows.push_back(std::vector<float>(r.e.values.begin() + i * r.e.dim, r.e.values.begin() + (i + 1) * r.e.dim));
  cli::print_json({{"tokens", r.tokens}, {"layer", r.layer}, {"pool", r.pool}, {"dim", r.e.dim},
              {"kv_cache_bytes", KvStorage::live_bytes()}, {"embedding", r.pool == "none" ? rows : rows[0]}});
}

void print_text(const EmbedResult& r) {
  fmt::print("{} tokens, layer {}, pool {}, dim {}, KV cache bytes allocated: {}\n", r.tokens, r.layer, r.pool, r.e.dim,
             KvStorage::live_bytes());
  for (int64_t i = 0; i < r.e.rows; ++i) {
    fmt::print("[");
    for (int64_t k = 0; k < r.e.dim; ++k) fmt::print("{}{:.5f}", k ? ", " : "", r.e.values[i * r.e.dim + k]);
    fmt::print("]\n");
  }
}

}  // namespace

void add_embed(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  auto* cmd = app.add_subcommand("embed", "Hidden states of a prompt from one pass, with no KV cache");
  add_model_options(cmd, o->m, kModel | kContext | kThreads | kSimd,
                    "The longest prompt in tokens, e.g. 8k (default: the model's trained context)");
  cmd->add_option("-p,--prompt", o->prompt, "Text to embed (special-token text is parsed)")->required();
  cmd->add_option("--layer", o->layer, "0 = token embeddings, L = output of block L; default: last block + final norm")
      ->transform(integer_in(0, 1 << 20));
  cmd->add_option("--pool", o->pool, "none (every token), mean or last")
      ->capture_default_str()
      ->check(one_of({"none", "mean", "last"}));
  cmd->add_flag("--json", o->json, "Print {\"tokens\", \"layer\", \"pool\", \"dim\", \"embedding\"}");
  cmd->callback([o] {
    o->m.validate();
    const EmbedResult r = embed_prompt(*o);
    o->json ? print_json(r) : print_text(r);
  });
}

}  // namespace tally::cli
