// tally: the command-line front end. One subcommand per file (cmd_*.cpp).
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tally: a KV-cache-centred inference engine for decoder-only language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tally 0.1.0");
  tally::cli::add_inspect(app);
  tally::cli::add_tokenize(app);
  tally::cli::add_detokenize(app);
  tally::cli::add_run(app);
  tally::cli::add_chat(app);
  tally::cli::add_logits(app);
  tally::cli::add_perplexity(app);
  tally::cli::add_kv_plan(app);
  tally::cli::add_lab(app);
  tally::cli::add_embed(app);
  tally::cli::add_bench(app);
  tally::cli::add_serve(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tally: %s (see tally --help)\n", e.what());
    return 2;
  } catch (const tally::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tally: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tally: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
