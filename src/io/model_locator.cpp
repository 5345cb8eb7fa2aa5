#include "io/model_locator.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace tally {

std::string tally_home() {
  if (const char* h = std::getenv("TALLY_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/tally";
}

std::string default_model_path() { return tally_home() + "/models/" + kDefaultModelFile; }

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path))
    fail("no model given (-m PATH) and the default model is not installed at {}: run scripts/fetch_model.sh",
         path);
  return path;
}

}  // namespace tally
