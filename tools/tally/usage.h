#pragma once
// How the command line is read before and after CLI11 parses it, and how a
// mistake in it is reported: one line naming the flag, then the value, then
// the subcommand's help, exit 2 (docs/reliability.md). Three helps for
// people who come from llama.cpp: its spellings of flags are rewritten to
// tally's (-ngl, -sys), unknown flags and commands get a "did you mean",
// and every mistake points at the help of the command it was made in.
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tally::cli {

// A command line that is wrong by itself, whatever the model and files it
// names: an option out of its range, options that do not go together, a
// required one missing. main() prints it with the command's help and exits 2;
// a tally::Error (exit 1) is for input or requests that cannot be served.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

template <typename... Args>
[[noreturn]] void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

// argv with llama.cpp's multi-letter single-dash flags (which CLI11 would
// read as bundles of one-letter flags: -ngl as -n gl) in tally's long
// spelling: -ngl -> --n-gpu-layers, -sys -> --system-prompt (also as -ngl=N).
std::vector<std::string> llama_spellings(int argc, char** argv);

// The deepest subcommand argv names (the root app when none), for "see
// tally run --help"; stops at the first word that names none.
CLI::App* named_command(CLI::App& app, const std::vector<std::string>& args);
// "tally run": the command's path from the root.
std::string command_path(const CLI::App* cmd);

// The first word of args (after the command path) that looks like an option
// and that `cmd` has no option for, skipping the values of options that take
// one; "" when there is none. With the suggestion, if any, in *suggestion.
std::string unknown_option(const CLI::App& cmd, const std::vector<std::string>& args, std::string* suggestion);

// Every option name of `cmd` ("--ctx", "-c"), for suggestions.
std::vector<std::string> option_names(const CLI::App& cmd);
// The names of `cmd`'s subcommands.
std::vector<std::string> subcommand_names(const CLI::App& cmd);

}  // namespace tally::cli
