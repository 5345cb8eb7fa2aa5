#pragma once
// Locates the tests' model, SmolLM2-135M-Instruct Q4_1 (catalog name
// smollm2:135m: small enough to run in every test), for tests that need real
// weights or a real vocabulary, exactly where `tally run -m smollm2:135m`
// looks (io/model_locator.h: $TALLY_HOME/models/, TALLY_HOME defaulting to
// ~/.cache/tally). Returns "" when it is not there; such tests GTEST_SKIP,
// or fail when TALLY_REQUIRE_MODEL=1.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/model_locator.h"

namespace tally_test {

inline constexpr const char* kTestModel = "smollm2:135m";

// Where a catalog model is installed, or "" when it is not.
inline std::string catalog_model_path(const char* name) {
  const tally::CatalogModel* m = tally::Catalog::get().find(name);
  if (m == nullptr) return "";
  const std::string p = tally::installed_path(*m);
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) ? p : "";
}

inline std::string test_model_path() { return catalog_model_path(kTestModel); }

inline bool model_required() {
  const char* r = std::getenv("TALLY_REQUIRE_MODEL");
  return r != nullptr && std::string(r) == "1";
}

// Files that llama.cpp's llama-quantize derives from the default model (the
// K-quant tests' Q4_K_M; scripts/fixtures/make_kquant_fixtures.py makes it):
// looked up in $TALLY_DERIVED_MODELS when set, else beside the default model
// ($TALLY_HOME/models/). "" when absent: their tests skip,
// or fail when TALLY_REQUIRE_DERIVED_MODELS=1 (TALLY_REQUIRE_MODEL does not
// cover them: making them needs a llama.cpp build).
inline std::string derived_model_path(const std::string& name) {
  const char* d = std::getenv("TALLY_DERIVED_MODELS");
  const std::filesystem::path dir = d != nullptr && *d != '\0'
                                        ? std::filesystem::path(d)
                                        : std::filesystem::path(tally::models_dir());
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / name, ec) ? (dir / name).string() : "";
}

inline bool derived_models_required() {
  const char* r = std::getenv("TALLY_REQUIRE_DERIVED_MODELS");
  return r != nullptr && std::string(r) == "1";
}

}  // namespace tally_test
