#pragma once
// Locates the default model for tests that need real weights or a real
// vocabulary: $TALLY_HOME/models/ first, then $TALLY_HOME/ (TALLY_HOME
// defaults to ~/.cache/tally). Returns "" when the file is in neither place;
// such tests GTEST_SKIP, or fail when TALLY_REQUIRE_MODEL=1.
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tally_test {

inline constexpr const char* kDefaultModelName = "SmolLM2-135M-Instruct.Q4_1.gguf";

inline std::string default_model_path() {
  std::string home;
  if (const char* h = std::getenv("TALLY_HOME"); h != nullptr && *h != '\0') {
    home = h;
  } else if (const char* u = std::getenv("HOME"); u != nullptr && *u != '\0') {
    home = std::string(u) + "/.cache/tally";
  } else {
    return "";
  }
  for (const std::string& dir : {home + "/models/", home + "/"}) {
    std::error_code ec;
    const std::string p = dir + kDefaultModelName;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return "";
}

inline bool model_required() {
  const char* r = std::getenv("TALLY_REQUIRE_MODEL");
  return r != nullptr && std::string(r) == "1";
}

}  // namespace tally_test
