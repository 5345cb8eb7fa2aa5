#include "model/architecture.h"

#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace {
constexpr Architecture kArchitectures[] = {
    {"llama", RopePairing::Adjacent},
};
}

const Architecture& architecture_for(std::string_view name) {
  for (const auto& a : kArchitectures)
    if (a.name == name) return a;
  std::string supported;
  for (const auto& a : kArchitectures) supported += (supported.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", excerpt(name), supported);
}

}  // namespace tally
