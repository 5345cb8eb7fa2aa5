// tally: the command-line front end. One subcommand per file (cmd_*.cpp).
// Exit codes: 0 success; 1 bad input or a request that cannot be served
// (tally::Error, one line on stderr); 2 a command line that is wrong by
// itself (it does not parse, a value is out of its option's range, options
// conflict: CLI11's errors and UsageError); 3 an internal error (a bug).
// See docs/reliability.md.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/printable.h"
#include "option_checks.h"
#include "output.h"
#include "suggest.h"
#include "usage.h"

namespace {

// A message as one line of at most 4 KiB, its control characters escaped:
// messages quote file contents and flag values.
void print_error(const char* prefix, const std::string& msg, const std::string& suffix = "") {
  tally::PrintableOptions o;
  o.max_bytes = 4096;
  o.escape_quotes = false;
  std::fflush(stdout);
  std::fprintf(stderr, "tally: %s%s%s\n", prefix, tally::printable(msg, o).c_str(), suffix.c_str());
}

// The first word that names no subcommand where one is required, or nullptr.
// CLI11 reports it only as "A subcommand is required", without the word.
CLI::App* unknown_subcommand(CLI::App& app, const std::vector<std::string>& args, std::string& word) {
  CLI::App* at = &app;
  for (size_t i = 1; i < args.size() && (args[i].empty() || args[i][0] != '-'); ++i) {
    CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(args[i]);
    } catch (const CLI::OptionNotFound&) {
    }
    if (sub != nullptr) {
      at = sub;
      continue;
    }
    if (at->get_require_subcommand_min() == 0) return nullptr;
    word = args[i];
    return at;
  }
  return nullptr;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Help and version text go to stdout like any output (through stdio, so that
// a failed write is seen with its reason): one that cannot be written is an error.
int finish_output(int code) {
  try {
    tally::cli::flush_stdout();
  } catch (const tally::Error& e) {
    print_error("error: ", e.what());
    return 1;
  }
  return code;
}

int print_help(CLI::App& app, const CLI::Error& e) {
  std::ostringstream out, err;
  const int code = app.exit(e, out, err);
  std::fputs(err.str().c_str(), stderr);
  if (std::fputs(out.str().c_str(), stdout) == EOF) {  // the reason, before a later call changes errno
    print_error("error: ", std::string("cannot write the output to stdout: ") + std::strerror(errno));
    return 1;
  }
  return finish_output(code);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tally::cli;
  CLI::App app{"tally: a KV-cache-centred inference engine for decoder-only language models (x86-64 Linux, CPU)",
               "tally"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tally 0.1.0");
  add_inspect(app);
  add_tokenize(app);
  add_detokenize(app);
  add_run(app);
  add_chat(app);
  add_logits(app);
  add_perplexity(app);
  add_kv_plan(app);
  add_lab(app);
  add_embed(app);
  add_bench(app);
  add_serve(app);
  add_models(app);
  add_cache(app);
  try {
    strict_numbers(app);
  } catch (const std::exception& e) {  // an option without a range: a bug, caught by any test that runs tally
    print_error("internal error: ", e.what());
    return 3;
  }

  const std::vector<std::string> args = llama_spellings(argc, argv);
  if (args.size() == 1) {  // `tally` alone: what it can do
    std::fputs(app.help().c_str(), stdout);
    return finish_output(0);
  }
  std::string word;
  if (CLI::App* at = unknown_subcommand(app, args, word)) {
    const std::vector<std::string> names = subcommand_names(*at);
    const std::string guess = closest(word, names);
    const std::string where = at == &app ? "" : at->get_name() + " ";
    print_error("",
                "unknown command '" + word + "'" + (guess.empty() ? "" : " (did you mean " + where + guess + "?)") + " (" +
                    where + "commands: " + join(names) + ")",
                " (see " + command_path(at) + " --help)");
    return 2;
  }
  const std::string help = [&] { return " (see " + command_path(named_command(app, args)) + " --help)"; }();
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes them last first
    app.parse(reversed);
    flush_stdout();
  } catch (const CLI::CallForHelp& e) {
    return print_help(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return print_help(app, e);
  } catch (const CLI::CallForVersion& e) {
    return print_help(app, e);
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the words it did not expect last first ("2048 --ctx-size"): name the option instead.
    std::string guess;
    const std::string opt = unknown_option(app, args, &guess);
    if (!opt.empty())
      print_error("", "unknown option '" + opt + "'" + (guess.empty() ? "" : " (did you mean " + guess + "?)"), help);
    else
      print_error("", e.what(), help);
    return 2;
  } catch (const CLI::ParseError& e) {
    print_error("", e.what(), help);
    return 2;
  } catch (const UsageError& e) {
    print_error("", e.what(), help);
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
