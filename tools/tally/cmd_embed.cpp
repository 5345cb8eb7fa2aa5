// tally embed: hidden states of one cache-free pass (the text-encoder use).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "output.h"
#include "kv/kv_storage.h"
#include "model_options.h"
#include "runtime/embedder.h"

namespace tally::cli {

void add_embed(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    std::string prompt, pool = "mean";
    int64_t layer = -1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("embed", "Hidden states of a prompt from one pass, with no KV cache");
  add_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Text to embed (special-token text is parsed)")->required();
  cmd->add_option("--layer", o->layer, "0 = token embeddings, L = output of block L; default: last block + final norm");
  cmd->add_option("--pool", o->pool, "none (every token), mean or last")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print {\"tokens\", \"layer\", \"pool\", \"dim\", \"embedding\"}");
  cmd->callback([o] {
    const Pooling pool = pooling_from_name(o->pool);
    LoadedModel lm = load_model(o->m);
    const auto ids = encode_input(*lm.tokenizer, o->prompt, true, true, "the prompt");
    const Embedding e = embed(*lm.model, ids, o->layer, pool, o->m.threads);
    const int64_t layer = o->layer < 0 ? lm.model->config().n_layer : o->layer;
    if (o->json) {
      nlohmann::json rows = nlohmann::json::array();
      for (int64_t r = 0; r < e.rows; ++r)
        rows.push_back(std::vector<float>(e.values.begin() + r * e.dim, e.values.begin() + (r + 1) * e.dim));
      nlohmann::json j{{"tokens", ids.size()}, {"layer", layer}, {"pool", o->pool}, {"dim", e.dim},
                       {"kv_cache_bytes", KvStorage::live_bytes()},
                       {"embedding", pool == Pooling::None ? rows : rows[0]}};
      print_json(j);
    } else {
      fmt::print("{} tokens, layer {}, pool {}, dim {}, KV cache bytes allocated: {}\n", ids.size(), layer, o->pool,
                 e.dim, KvStorage::live_bytes());
      for (int64_t r = 0; r < e.rows; ++r) {
        fmt::print("[");
        for (int64_t i = 0; i < e.dim; ++i) fmt::print("{}{:.5f}", i ? ", " : "", e.values[r * e.dim + i]);
        fmt::print("]\n");
      }
    }
  });
}

}  // namespace tally::cli
