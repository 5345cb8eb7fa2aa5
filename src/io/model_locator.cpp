#include "io/model_locator.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace fs = std::filesystem;

std::string tally_home() {
  if (const char* h = std::getenv("TALLY_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/tally";
}

std::string models_dir() { return tally_home() + "/models"; }

std::string installed_path(const CatalogModel& m) { return models_dir() + "/" + m.file; }

std::string default_model_path() { return installed_path(Catalog::get().default_model()); }

namespace {

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string not_installed(const CatalogModel& m) {
  return fmt::format("run `tally pull {}` to install it ({} download)", m.name, format_bytes_short(m.bytes));
}

std::string installed_list() {
  const auto names = installed_model_names();
  if (names.empty()) return "none installed";
  std::string s = "installed: ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

}  // namespace

std::vector<std::string> installed_model_names() {
  const Catalog& c = Catalog::get();
  std::vector<std::string> out, files;
  for (const auto& m : c.models())
    if (is_file(installed_path(m))) out.push_back(m.name);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(models_dir(), ec)) {
    const std::string f = e.path().filename().string();
    if (f.empty() || f[0] == '.' || !e.is_regular_file(ec)) continue;
    const bool catalogued =
        std::any_of(c.models().begin(), c.models().end(), [&](const CatalogModel& m) { return m.file == f; });
    if (!catalogued) files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  out.insert(out.end(), files.begin(), files.end());
  return out;
}

ModelLocation locate_model(const std::string& given) {
  const Catalog& c = Catalog::get();
  ModelLocation loc;
  if (given.empty()) {
    loc.catalog = &c.default_model();
    loc.path = installed_path(*loc.catalog);
    if (!is_file(loc.path))
      fail("no model given (-m NAME or PATH) and the default model {} is not installed: {}", loc.catalog->name,
           not_installed(*loc.catalog));
    return loc;
  }
  const CatalogModel* named = c.find(given);
  const bool plain_name = given.find('/') == std::string::npos;
  std::error_code ec;
  if (fs::exists(given, ec)) {
    loc.path = given;
    if (named != nullptr || (plain_name && is_file(models_dir() + "/" + given) &&
                             !fs::equivalent(given, models_dir() + "/" + given, ec)))
      loc.note = fmt::format("-m {0}: both a path here and a model name; using the path {0}",
                             excerpt(given));
    return loc;
  }
  if (named != nullptr) {
    loc.catalog = named;
    loc.path = installed_path(*named);
    if (!is_file(loc.path)) fail("-m {}: the model {} is not installed: {}", excerpt(given), named->name, not_installed(*named));
    return loc;
  }
  if (plain_name && !given.starts_with(".")) {
    for (const std::string& f : {given, given + ".gguf"})
      if (is_file(models_dir() + "/" + f)) {
        loc.path = models_dir() + "/" + f;
        return loc;
      }
  }
  if (!plain_name || given.ends_with(".gguf")) {
    loc.path = given;  // a path: opening it names the missing file
    return loc;
  }
  fail("-m {}: no such file, catalog model or file in {} ({}; catalog: {}; `tally pull NAME` installs one)",
       excerpt(given), models_dir(), installed_list(), c.names());
}

}  // namespace tally
