#pragma once
// How an error message names a JSON value's kind ("an object", "a string",
// "an integer", ...): the same words wherever a request or a schema is
// refused. Takes either JSON type (sorted or ordered objects).
#include <nlohmann/json.hpp>

namespace tally {

inline const char* json_kind(nlohmann::json::value_t t) {
  using V = nlohmann::json::value_t;
  switch (t) {
    case V::null: return "null";
    case V::object: return "an object";
    case V::array: return "an array";
    case V::string: return "a string";
    case V::boolean: return "a boolean";
    case V::number_integer:
    case V::number_unsigned: return "an integer";
    case V::number_float: return "a number";
    default: return "a value";
  }
}

template <class Json>
const char* json_kind(const Json& v) {
  return json_kind(v.type());
}

}  // namespace tally
