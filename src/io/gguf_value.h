#pragma once
// One GGUF metadata value: a scalar, a string or an (arbitrarily nested) array.
// Invariant: `type` says which member is meaningful; arrays hold elements of
// `elem_type` only.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tally {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

std::string_view gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;  // unsigned integers and bool
  int64_t i = 0;   // signed integers
  double f = 0;    // floats
  std::string s;   // strings
  GgufType elem_type = GgufType::U8;  // arrays
  std::vector<GgufValue> arr;         // arrays

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == GgufType::F32 || type == GgufType::F64; }
  // Accessors throw tally::Error naming `key` when the value does not fit.
  uint64_t as_u64(std::string_view key) const;
  int64_t as_i64(std::string_view key) const;
  double as_f64(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  const std::vector<GgufValue>& as_array(std::string_view key) const;
  // Human-readable rendering, safe for a terminal (strings quoted, with control
  // characters and invalid bytes escaped); arrays longer than max_items are abbreviated.
  std::string to_string(size_t max_items = 8) const;
};

}  // namespace tally
