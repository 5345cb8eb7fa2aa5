#include "usage.h"

#include "core/number_text.h"
#include "suggest.h"

namespace tally::cli {
namespace {

// llama.cpp's spellings that CLI11 cannot take as they are (one dash, several letters).
struct Spelling {
  const char* llama;
  const char* tally;
};
constexpr Spelling kSpellings[] = {{"-ngl", "--n-gpu-layers"}, {"-sys", "--system-prompt"}};

bool is_number(std::string_view s) { return parse_real(s).has_value(); }

// An option takes a value (or several) after it, unlike a flag.
bool takes_value(const CLI::Option* o) { return o->get_type_size_max() > 0 && o->get_items_expected_max() > 0; }

}  // namespace

std::vector<std::string> llama_spellings(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0)
      for (const Spelling& s : kSpellings) {
        const std::string_view l = s.llama;
        if (a == l || (a.size() > l.size() && a.compare(0, l.size(), l) == 0 && a[l.size()] == '='))
          a = std::string(s.tally) + a.substr(l.size());
      }
    out.push_back(std::move(a));
  }
  return out;
}

CLI::App* named_command(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* at = &app;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].empty() || args[i][0] == '-') continue;
    CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(args[i]);
    } catch (const CLI::OptionNotFound&) {
    }
    if (sub == nullptr) break;
    at = sub;
  }
  return at;
}

std::string command_path(const CLI::App* cmd) {
  std::string path;
  for (const CLI::App* a = cmd; a != nullptr && a->get_parent() != nullptr; a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " ") + path;
  return path.empty() ? "tally" : "tally " + path;
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* s : cmd.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

std::string unknown_option(const CLI::App& root, const std::vector<std::string>& args, std::string* suggestion) {
  const CLI::App* cur = &root;
  auto report = [&](const std::string& word) {
    std::vector<std::string> names = option_names(*cur);
    if (suggestion) *suggestion = closest(word, names);
    return word;
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || is_number(a)) {
      const auto subs = cur->get_subcommands([](const CLI::App*) { return true; });
      for (const CLI::App* s : subs)
        if (s->check_name(a)) {
          cur = s;
          break;
        }
      continue;
    }
    if (a[1] == '-') {
      const size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const CLI::Option* o = cur->get_option_no_throw(name);
      if (o == nullptr) return report(name);
      if (eq != std::string::npos || !takes_value(o)) continue;
      if (o->get_items_expected_max() == 1) {
        ++i;  // its value, whatever it looks like (--seed -1)
      } else {
        while (i + 1 < args.size() && (args[i + 1].empty() || args[i + 1][0] != '-' || is_number(args[i + 1]))) ++i;
      }
      continue;
    }
    // One dash: a bundle of one-letter flags, the last of which may take the rest or the next word.
    for (size_t k = 1; k < a.size(); ++k) {
      const std::string name = std::string("-") + a[k];
      const CLI::Option* o = cur->get_option_no_throw(name);
      if (o == nullptr) return report(k == 1 ? a.substr(0, a.find('=')) : name);
      if (!takes_value(o)) continue;
      if (k + 1 == a.size()) ++i;
      break;
    }
  }
  return "";
}

}  // namespace tally::cli
