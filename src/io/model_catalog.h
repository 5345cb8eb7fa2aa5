#pragma once
// The catalog of models `tally pull NAME` installs and `-m NAME` names
// (models/catalog.json, compiled in; $TALLY_CATALOG names a file that
// replaces it). Each model is one file assembled from members of PyPI wheels.
//
// Invariants (checked when a catalog is parsed, so every user may rely on them):
// - names and aliases are unique across the catalog, and none contains '/'
//   (so a name can never be a path relative to the working directory with a
//   directory part);
// - `file` is a plain file name (no '/', not starting with '.');
// - there is at least one part, the parts' bytes add up to `bytes`, and each
//   sha256 is 64 lowercase hex digits;
// - package names and versions hold only [A-Za-z0-9._-] (they reach pip's
//   command line as NAME==VERSION);
// - the default names a model of the catalog.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally {

struct CatalogPart {
  std::string package, version;  // a PyPI requirement PACKAGE==VERSION
  std::string member;            // the path inside that package's wheel
  uint64_t bytes = 0;
  std::string sha256;
};

// A file from a wheel installed beside the model (license, terms of use).
struct CatalogTerms {
  std::string package, version, member;
};

struct CatalogModel {
  std::string name;
  std::vector<std::string> aliases;
  std::string file;  // its name under $TALLY_HOME/models
  uint64_t bytes = 0;
  std::string sha256;
  std::string architecture, quantization, tensor_types;
  int64_t context = 0;  // trained context, tokens
  bool instruct = false, chat_template = false;
  std::string use, license, license_url, source;
  std::vector<CatalogPart> parts;
  std::vector<CatalogTerms> terms;

  // True when `s` is its name or one of its aliases.
  bool named(std::string_view s) const;
};

class Catalog {
 public:
  // Throws tally::Error naming `source` and the model and field at fault.
  static Catalog parse(const std::string& json_text, const std::string& source);
  // The compiled-in catalog, or $TALLY_CATALOG's when that is set (read once).
  static const Catalog& get();

  const std::vector<CatalogModel>& models() const { return models_; }
  // By name or alias; nullptr when none.
  const CatalogModel* find(std::string_view name) const;
  const CatalogModel& default_model() const { return models_[default_index_]; }
  // "a, b, c": the names, for messages.
  std::string names() const;
  const std::string& source() const { return source_; }

 private:
  std::vector<CatalogModel> models_;
  size_t default_index_ = 0;
  std::string source_;
};

}  // namespace tally
