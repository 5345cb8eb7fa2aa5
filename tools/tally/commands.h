#pragma once
// Each subcommand of the `tally` binary registers itself on the root app.
// Callbacks throw tally::Error on bad input; main() turns it into one line on stderr.
#include <CLI/CLI.hpp>

namespace tally::cli {

void add_inspect(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_detokenize(CLI::App& app);
void add_run(CLI::App& app);
void add_chat(CLI::App& app);
void add_logits(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_kv_plan(CLI::App& app);
void add_lab(CLI::App& app);
void add_embed(CLI::App& app);
void add_bench(CLI::App& app);
void add_serve(CLI::App& app);
// pull, list, rm
void add_models(CLI::App& app);
void add_cache(CLI::App& app);

}  // namespace tally::cli
