// tally: the command-line front end. One subcommand per file (cmd_*.cpp).
// Exit codes: 0 success; 1 bad input or a request that cannot be served
// (tally::Error, one line on stderr); 2 a command line that does not parse;
// 3 an internal error (a bug). See docs/reliability.md.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "commands.h"
#include "core/error.h"
#include "core/printable.h"
#include "option_checks.h"
#include "output.h"

namespace {

// A message as one line of at most 4 KiB, its control characters escaped:
// messages quote file contents and flag values.
void print_error(const char* prefix, const std::string& msg, const char* suffix = "") {
  tally::PrintableOptions o;
  o.max_bytes = 4096;
  o.escape_quotes = false;
  std::fflush(stdout);
  std::fprintf(stderr, "tally: %s%s%s\n", prefix, tally::printable(msg, o).c_str(), suffix);
}

// The first word that names no subcommand where one is required, or nullptr.
// CLI11 reports it only as "A subcommand is required", without the word.
CLI::App* unknown_subcommand(CLI::App& app, int argc, char** argv, std::string& word) {
  CLI::App* at = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(argv[i]);
    } catch (const CLI::OptionNotFound&) {
    }
    if (sub != nullptr) {
      at = sub;
      continue;
    }
    if (at->get_require_subcommand_min() == 0) return nullptr;
    word = argv[i];
    return at;
  }
  return nullptr;
}

std::string subcommand_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + s->get_name();
  return names;
}

}  // namespace

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
  tally::cli::add_models(app);
  tally::cli::strict_numbers(app);
  std::string word;
  if (CLI::App* at = unknown_subcommand(app, argc, argv, word)) {
    print_error("", "unknown command '" + word + "' (" + (at == &app ? "" : at->get_name() + " ") +
                        "commands: " + subcommand_names(*at) + ")",
                " (see tally --help)");
    return 2;
  }
  try {
    app.parse(argc, argv);
    tally::cli::flush_stdout();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error("", e.what(), " (see tally --help)");
    return 2;
  } catch (const tally::Error& e) {
    print_error("error: ", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    print_error("error: ", "out of memory: the request needs more memory than this machine can give (lower -c or --batch)");
    return 1;
  } catch (const std::system_error& e) {
    // fmt::print throws this when stdout cannot take the text.
    if (std::ferror(stdout)) {
      print_error("error: ", std::string("cannot write the output to stdout: ") + e.code().message());
      return 1;
    }
    print_error("internal error: ", e.what());
    return 3;
  } catch (const std::exception& e) {
    print_error("internal error: ", e.what());
    return 3;
  }
  return 0;
}
