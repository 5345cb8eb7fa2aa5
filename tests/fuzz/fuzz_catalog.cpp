// libFuzzer target for the model catalog reader ($TALLY_CATALOG, and
// models/catalog.json compiled in): any text must give a catalog whose
// invariants hold (io/model_catalog.h) or a tally::Error of one bounded line.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.h"
#include "fuzz_checks.h"
#include "io/model_catalog.h"

namespace {

constexpr const char* kTarget = "fuzz_catalog";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  tally_fuzz::violated(kTarget, what, detail);
}

bool plain(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tally::Catalog c = tally::Catalog::parse(text, "fuzz.json");
    if (c.models().empty() || c.find(c.default_model().name) != &c.default_model()) violated("default", text);
    std::set<std::string> names;
    for (const auto& m : c.models()) {
      uint64_t sum = 0;
      for (const auto& p : m.parts) {
        if (!plain(p.package) || !plain(p.version)) violated("package or version", text);
        sum += p.bytes;
      }
      if (m.parts.empty() || sum != m.bytes) violated("parts add up to bytes", text);
      if (m.file.empty() || m.file[0] == '.' || m.file.find('/') != std::string::npos) violated("plain file", text);
      if (!names.insert(m.name).second) violated("unique names", text);
      for (const auto& a : m.aliases)
        if (!names.insert(a).second || a.find('/') != std::string::npos) violated("unique aliases", text);
    }
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
  }
  return 0;
}
