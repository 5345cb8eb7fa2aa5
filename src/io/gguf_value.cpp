#include "io/gguf_value.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/printable.h"

namespace tally {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}

static bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

uint64_t GgufValue::as_u64(std::string_view key) const {
  if (!is_integer()) fail("metadata '{}' is a {}, expected an integer", excerpt(key, 100), gguf_type_name(type));
  if (is_signed(type)) {
    if (i < 0) fail("metadata '{}' is negative ({}), expected a count", key, i);
    return static_cast<uint64_t>(i);
  }
  return u;
}

int64_t GgufValue::as_i64(std::string_view key) const {
  if (!is_integer()) fail("metadata '{}' is a {}, expected an integer", excerpt(key, 100), gguf_type_name(type));
  if (is_signed(type)) return i;
  if (u > static_cast<uint64_t>(INT64_MAX)) fail("metadata '{}' = {} does not fit in i64", key, u);
  return static_cast<int64_t>(u);
}

double GgufValue::as_f64(std::string_view key) const {
  if (type == GgufType::F32 || type == GgufType::F64) return f;
  if (is_integer()) return is_signed(type) ? static_cast<double>(i) : static_cast<double>(u);
  fail("metadata '{}' is a {}, expected a number", excerpt(key, 100), gguf_type_name(type));
}

bool GgufValue::as_bool(std::string_view key) const {
  if (type == GgufType::BOOL) return u != 0;
  if (is_integer()) return as_u64(key) != 0;
  fail("metadata '{}' is a {}, expected a bool", excerpt(key, 100), gguf_type_name(type));
}

const std::string& GgufValue::as_string(std::string_view key) const {
  if (type != GgufType::STRING) fail("metadata '{}' is a {}, expected a string", excerpt(key, 100), gguf_type_name(type));
  return s;
}

const std::vector<GgufValue>& GgufValue::as_array(std::string_view key) const {
  if (type != GgufType::ARRAY) fail("metadata '{}' is a {}, expected an array", excerpt(key, 100), gguf_type_name(type));
  return arr;
}

std::string GgufValue::to_string(size_t max_items) const {
  switch (type) {
    case GgufType::STRING: {
      PrintableOptions o;  // control characters and bytes that are not UTF-8 as escapes
      o.max_bytes = SIZE_MAX;
      std::string out = "\"";
      out += printable(s, o);
      out += '"';
      return out;
    }
    case GgufType::BOOL: return u ? "true" : "false";
    case GgufType::F32: case GgufType::F64: return fmt::format("{}", f);
    case GgufType::ARRAY: {
      if (arr.size() > max_items)
        return fmt::format("[{} x {}]", arr.size(), gguf_type_name(elem_type));
      std::string out = "[";
      for (size_t k = 0; k < arr.size(); ++k) {
        if (k) out += ", ";
        out += arr[k].to_string(max_items);
      }
      return out + "]";
    }
    default:
      return is_signed(type) ? fmt::format("{}", i) : fmt::format("{}", u);
  }
}

}  // namespace tally
