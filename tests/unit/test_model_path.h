#pragma once
// Locates the default model for tests that need real weights or a real
// vocabulary, exactly where `tally run` looks (io/model_locator.h:
// $TALLY_HOME/models/, TALLY_HOME defaulting to ~/.cache/tally). Returns ""
// when it is not there; such tests GTEST_SKIP, or fail when TALLY_REQUIRE_MODEL=1.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/model_locator.h"

namespace tally_test {

inline std::string default_model_path() {
  const std::string p = tally::default_model_path();
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) ? p : "";
}

inline bool model_required() {
  const char* r = std::getenv("TALLY_REQUIRE_MODEL");
  return r != nullptr && std::string(r) == "1";
}

}  // namespace tally_test
