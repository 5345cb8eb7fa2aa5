#include "io/model_catalog.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "core/printable.h"
#include "io/json_input.h"
#include "io/text_file.h"

namespace tally {

// models/catalog.json's bytes, compiled in (CMakeLists.txt writes catalog_data.cpp).
extern const unsigned char kCatalogJson[];

namespace {

bool plain_token(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string required_string(const JsonFields& f, const char* key) {
  auto v = f.string(key);
  if (!v || v->empty()) fail("{}: '{}' is missing or empty", f.source(), key);
  return *v;
}

std::vector<const nlohmann::json*> objects(const JsonFields& f, const char* key, bool required) {
  const nlohmann::json* a = f.find(key);
  if (a == nullptr) {
    if (required) fail("{}: '{}' is missing", f.source(), key);
    return {};
  }
  if (!a->is_array()) fail("{}: '{}' must be a list, got {}", f.source(), key, describe_json(*a));
  std::vector<const nlohmann::json*> out;
  for (const auto& e : *a) out.push_back(&e);
  return out;
}

CatalogModel parse_model(const nlohmann::json& j, const std::string& where) {
  const JsonFields f(j, where);
  CatalogModel m;
  m.name = required_string(f, "name");
  m.aliases = f.strings("aliases").value_or(std::vector<std::string>{});
  m.file = required_string(f, "file");
  if (m.file.find('/') != std::string::npos || m.file[0] == '.')
    fail("{}: 'file' must be a plain file name, got '{}'", f.source(), excerpt(m.file));
  m.bytes = f.count("bytes").value_or(0);
  if (m.bytes == 0) fail("{}: 'bytes' is missing", f.source());
  m.sha256 = required_string(f, "sha256");
  if (!is_sha256(m.sha256)) fail("{}: 'sha256' must be 64 lowercase hex digits", f.source());
  m.architecture = required_string(f, "architecture");
  m.quantization = required_string(f, "quantization");
  m.tensor_types = f.string("tensor_types").value_or("");
  m.context = static_cast<int64_t>(f.count("context", INT32_MAX).value_or(0));
  if (m.context == 0) fail("{}: 'context' is missing", f.source());
  m.instruct = f.flag("instruct").value_or(false);
  m.chat_template = f.flag("chat_template").value_or(false);
  m.use = required_string(f, "use");
  m.license = required_string(f, "license");
  m.license_url = f.string("license_url").value_or("");
  m.source = required_string(f, "source");
  uint64_t sum = 0;
  for (const nlohmann::json* pj : objects(f, "parts", true)) {
    const JsonFields pf(*pj, where + ", part " + std::to_string(m.parts.size() + 1));
    CatalogPart p;
    p.package = required_string(pf, "package");
    p.version = required_string(pf, "version");
    if (!plain_token(p.package) || !plain_token(p.version))
      fail("{}: 'package' and 'version' may hold only letters, digits, '.', '_' and '-'", pf.source());
    p.member = required_string(pf, "member");
    p.bytes = pf.count("bytes").value_or(0);
    if (p.bytes == 0) fail("{}: 'bytes' is missing", pf.source());
    p.sha256 = required_string(pf, "sha256");
    if (!is_sha256(p.sha256)) fail("{}: 'sha256' must be 64 lowercase hex digits", pf.source());
    sum += p.bytes;
    m.parts.push_back(std::move(p));
  }
  if (m.parts.empty()) fail("{}: 'parts' is empty", f.source());
  if (sum != m.bytes) fail("{}: the parts hold {} bytes, but 'bytes' is {}", f.source(), sum, m.bytes);
  for (const nlohmann::json* tj : objects(f, "terms", false)) {
    const JsonFields tf(*tj, where + ", terms " + std::to_string(m.terms.size() + 1));
    CatalogTerms t{required_string(tf, "package"), required_string(tf, "version"), required_string(tf, "member")};
    if (!plain_token(t.package) || !plain_token(t.version))
      fail("{}: 'package' and 'version' may hold only letters, digits, '.', '_' and '-'", tf.source());
    m.terms.push_back(std::move(t));
  }
  return m;
}

}  // namespace

bool CatalogModel::named(std::string_view s) const {
  return s == name || std::find(aliases.begin(), aliases.end(), s) != aliases.end();
}

Catalog Catalog::parse(const std::string& json_text, const std::string& source) {
  const nlohmann::json doc = parse_json_input(json_text, source);
  const JsonFields top(doc, source);
  Catalog c;
  c.source_ = source;
  std::set<std::string> seen, files;
  for (const nlohmann::json* mj : objects(top, "models", true)) {
    const std::string where = fmt::format("{}, model {}", source, c.models_.size() + 1);
    CatalogModel m = parse_model(*mj, where);
    std::vector<std::string> names = m.aliases;
    names.push_back(m.name);
    for (const auto& n : names) {
      if (n.empty() || n.find('/') != std::string::npos)
        fail("{}: the name or alias '{}' is empty or holds a '/'", where, excerpt(n));
      if (!seen.insert(n).second) fail("{}: the name or alias '{}' is taken by another model", where, excerpt(n));
    }
    if (!files.insert(m.file).second) fail("{}: the file name '{}' is taken by another model", where, excerpt(m.file));
    c.models_.push_back(std::move(m));
  }
  if (c.models_.empty()) fail("{}: the catalog has no models", source);
  const std::string def = required_string(top, "default");
  const CatalogModel* d = c.find(def);
  if (d == nullptr) fail("{}: the default '{}' is not a model of the catalog", source, excerpt(def));
  c.default_index_ = static_cast<size_t>(d - c.models_.data());
  return c;
}

const Catalog& Catalog::get() {
  static const Catalog c = [] {
    if (const char* p = std::getenv("TALLY_CATALOG"); p != nullptr && *p != '\0')
      return parse(read_text_file(p, "catalog file", kMaxConfigBytes), p);
    return parse(reinterpret_cast<const char*>(kCatalogJson), "models/catalog.json");
  }();
  return c;
}

const CatalogModel* Catalog::find(std::string_view name) const {
  for (const auto& m : models_)
    if (m.named(name)) return &m;
  return nullptr;
}

std::string Catalog::names() const {
  std::string s;
  for (const auto& m : models_) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

}  // namespace tally
