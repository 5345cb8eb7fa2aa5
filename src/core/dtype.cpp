#include "core/dtype.h"

#include <algorithm>
#include <cctype>

namespace tally {

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  for (const auto& e : dtype_detail::kTable)
    if (e.id == id) return e.t;
  return std::nullopt;
}

std::string_view dtype_name(DType t) { return traits(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : dtype_detail::kTable) {
    if (e.t.name.size() != name.size()) continue;
    if (std::equal(name.begin(), name.end(), e.t.name.begin(), [](char a, char b) {
          return std::toupper((unsigned char)a) == std::toupper((unsigned char)b);
        }))
      return static_cast<DType>(e.id);
  }
  return std::nullopt;
}

}  // namespace tally
