// check_schema: the JSON-schema keywords tally enforces exactly, and nothing
// else. The grammar engine skips keywords it does not know and, where a
// schema combines some of them (anyOf beside properties, a length beside a
// pattern), uses one and drops the other; a dropped keyword would let through
// output that fails the schema. So the walk below is a whitelist: every
// keyword is one it knows to be enforced, in a combination enforced whole, or
// the schema is refused naming the keyword's JSON pointer.
#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json_kind.h"
#include "core/printable.h"
#include "grammar/grammar.h"

namespace tally::grammar {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxDepth = 64;

// Keywords that say something about the schema but constrain nothing.
constexpr std::array<std::string_view, 10> kAnnotations = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly", "writeOnly"};
// Keywords that decide alone what a schema accepts: the engine reads one of
// them and ignores the type-specific keywords beside it.
constexpr std::array<std::string_view, 6> kSelectors = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
// String formats the engine spells as a grammar.
constexpr std::array<std::string_view, 12> kFormats = {
    "date", "time", "date-time", "duration", "email", "hostname", "uuid", "uri", "uri-reference", "uri-template",
    "json-pointer", "relative-json-pointer"};
constexpr std::array<std::string_view, 7> kTypes = {"string", "number", "integer", "boolean", "null", "object", "array"};

// The type each type-specific keyword belongs to.
std::optional<std::string_view> keyword_type(std::string_view k) {
  if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "format") return "string";
  if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") return "number";
  if (k == "items" || k == "prefixItems" || k == "minItems" || k == "maxItems") return "array";
  if (k == "properties" || k == "required" || k == "additionalProperties") return "object";
  return std::nullopt;
}

template <class List>
bool in(const List& list, std::string_view k) {
  return std::find(list.begin(), list.end(), k) != list.end();
}

std::string escape_token(std::string_view k) {
  std::string s;
  for (char c : k) {
    if (c == '~')
      s += "~0";
    else if (c == '/')
      s += "~1";
    else
      s += c;
  }
  return s;
}

// Where, for a message: a JSON pointer (its last 200 bytes when longer), or "the root".
std::string where(const std::string& ptr) {
  if (ptr.empty()) return "the root";
  if (ptr.size() <= 200) return ptr;
  return "..." + ptr.substr(ptr.size() - 200);
}

// Messages quote the schema's own keys and values: made printable, one line.
[[noreturn]] void refuse(const std::string& message) {
  throw Error(printable(message, {.max_bytes = 400, .escape_quotes = false}));
}
[[noreturn]] void unsupported(const std::string& ptr, std::string_view why) {
  refuse(fmt::format("JSON schema: at {}: {}", where(ptr), why));
}
[[noreturn]] void empty_language(const std::string& ptr, std::string_view why) {
  refuse(fmt::format("JSON schema: {} at {}: no value satisfies the schema", why, where(ptr)));
}
[[noreturn]] void not_schema(const std::string& ptr, std::string_view why) {
  refuse(fmt::format("JSON schema: not a schema at {}: {}", where(ptr), why));
}

bool matches_type(const json& v, std::string_view t) {
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  return v.is_array();
}

class Walk {
 public:
  explicit Walk(const json& root) : root_(root) {}

  void schema(const json& s, const std::string& ptr, int depth, bool false_ok) {
    if (depth > kMaxDepth) not_schema(ptr, fmt::format("it nests deeper than {} schemas", kMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>() && !false_ok) empty_language(ptr, "the schema is false");
      return;
    }
    if (!s.is_object()) not_schema(ptr, fmt::format("a schema is an object or a boolean, not {}", json_kind(s)));

    // The types the schema allows (nullopt: any).
    std::optional<std::vector<std::string>> types;
    if (const auto t = s.find("type"); t != s.end()) {
      types.emplace();
      const std::string at = ptr + "/type";
      auto add = [&](const json& name, const std::string& p) {
        if (!name.is_string()) not_schema(p, fmt::format("a type is a string, not {}", json_kind(name)));
        if (!in(kTypes, name.get<std::string>()))
          not_schema(p, fmt::format("\"{}\" is not a JSON type", name.get<std::string>()));
        types->push_back(name.get<std::string>());
      };
      if (t->is_array()) {
        if (t->empty()) empty_language(at, "the type list is empty");
        for (size_t i = 0; i < t->size(); ++i) add((*t)[i], fmt::format("{}/{}", at, i));
      } else {
        add(*t, at);
      }
    }
    auto allows = [&](std::string_view t) {
      if (!types) return false;
      for (const std::string& x : *types)
        if (x == t || (t == "number" && x == "integer")) return true;
      return false;
    };

    // At most one selector; beside one, only annotations, $defs and (for
    // const and enum) a type the values are checked against.
    std::optional<std::string> selector;
    for (const auto& [k, v] : s.items())
      if (in(kSelectors, k)) {
        if (selector)
          unsupported(ptr + "/" + escape_token(k), fmt::format("'{}' beside '{}' is not supported", k, *selector));
        selector = k;
      }

    for (const auto& [k, v] : s.items()) {
      const std::string at = ptr + "/" + escape_token(k);
      if (in(kAnnotations, k) || k == "type") continue;
      if (k == "$defs" || k == "definitions") {
        if (!v.is_object()) not_schema(at, fmt::format("'{}' is an object of schemas, not {}", k, json_kind(v)));
        for (const auto& [name, d] : v.items()) schema(d, at + "/" + escape_token(name), depth + 1, false);
        continue;
      }
      if (in(kSelectors, k)) {
        selector_keyword(k, v, at, depth, types);
        continue;
      }
      if (k == "not") {
        if (v == json(true) || v == json::object()) empty_language(at, "'not' of a schema that accepts everything");
        unsupported(at, "'not' is not supported");
      }
      const std::optional<std::string_view> owner = keyword_type(k);
      if (!owner) unsupported(at, fmt::format("'{}' is not supported", k));
      if (selector) unsupported(at, fmt::format("'{}' beside '{}' is not supported", k, *selector));
      if (!allows(*owner))
        unsupported(at, fmt::format("'{}' needs \"type\": \"{}\" beside it", k, *owner));
    }
    if (selector) return;
    if (types) {
      if (allows("string")) string_keywords(s, ptr);
      if (allows("number")) number_keywords(s, ptr, allows("number") && !in(*types, "number"));
      if (allows("array")) array_keywords(s, ptr, depth);
      if (allows("object")) object_keywords(s, ptr, depth);
    }
  }

 private:
  void selector_keyword(const std::string& k, const json& v, const std::string& at, int depth,
                        const std::optional<std::vector<std::string>>& types) {
    if (types && k != "const" && k != "enum")
      unsupported(at, fmt::format("'{}' beside 'type' is not supported (state the type in each branch)", k));
    if (k == "$ref") {
      if (!v.is_string()) not_schema(at, fmt::format("'$ref' is a string, not {}", json_kind(v)));
      const std::string& ref = v.get_ref<const std::string&>();
      if (ref.empty() || ref[0] != '#') unsupported(at, "'$ref' to another document is not supported (only \"#/...\")");
      try {
        const json::json_pointer p(ref.substr(1));
        if (!root_.contains(p)) not_schema(at, fmt::format("'$ref' \"{}\" points to nothing", ref));
      } catch (const json::exception&) {
        not_schema(at, fmt::format("'$ref' \"{}\" is not a JSON pointer", ref));
      }
      return;
    }
    auto check_value = [&](const json& x, const std::string& p) {
      if (!types) return;
      for (const std::string& t : *types)
        if (matches_type(x, t)) return;
      empty_language(p, "a value outside the schema's type");
    };
    if (k == "const") {
      check_value(v, at);
      return;
    }
    if (k == "enum") {
      if (!v.is_array()) not_schema(at, fmt::format("'enum' is an array, not {}", json_kind(v)));
      if (v.empty()) empty_language(at, "an empty enum");
      for (size_t i = 0; i < v.size(); ++i) check_value(v[i], fmt::format("{}/{}", at, i));
      return;
    }
    // anyOf, oneOf, allOf
    if (!v.is_array()) not_schema(at, fmt::format("'{}' is an array of schemas, not {}", k, json_kind(v)));
    if (v.empty()) empty_language(at, fmt::format("an empty '{}'", k));
    if (k == "allOf" && v.size() > 1) unsupported(at, "'allOf' of more than one schema is not supported");
    for (size_t i = 0; i < v.size(); ++i) schema(v[i], fmt::format("{}/{}", at, i), depth + 1, false);
    // oneOf is exact only where no value can match two branches; the engine
    // would read overlapping ones as anyOf, letting through a value oneOf refuses.
    if (k == "oneOf")
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (!disjoint(v[i], v[j]))
            unsupported(fmt::format("{}/{}", at, j),
                        fmt::format("'oneOf' branches {} and {} may both match a value (not supported: use anyOf, or "
                                    "branches of different types or with different const values of a required property)",
                                    i, j));
  }

  // The schema a local $ref points to (one level), or the schema itself.
  const json& resolved(const json& s) const {
    if (s.is_object() && s.contains("$ref") && s.at("$ref").is_string()) {
      const std::string& ref = s.at("$ref").get_ref<const std::string&>();
      if (!ref.empty() && ref[0] == '#') {
        try {
          const json::json_pointer p(ref.substr(1));
          if (root_.contains(p)) return root_.at(p);
        } catch (const json::exception&) {
        }
      }
    }
    return s;
  }

  // The JSON types a branch may take (nullopt: any), by 'type', 'const' or 'enum'.
  static std::optional<std::vector<std::string>> branch_types(const json& s) {
    if (!s.is_object()) return std::nullopt;
    std::vector<std::string> out;
    auto of_value = [&](const json& x) {
      for (std::string_view t : kTypes)
        if (t != "number" && matches_type(x, t)) out.emplace_back(t);
      if (x.is_number() && !matches_type(x, "integer")) out.emplace_back("number");
    };
    if (s.contains("const")) {
      of_value(s.at("const"));
    } else if (s.contains("enum") && s.at("enum").is_array()) {
      for (const json& x : s.at("enum")) of_value(x);
    } else if (s.contains("type")) {
      const json& t = s.at("type");
      for (const json& x : t.is_array() ? t : json::array({t}))
        if (x.is_string()) {
          out.push_back(x.get<std::string>());
          if (out.back() == "number") out.emplace_back("integer");
        }
    } else {
      return std::nullopt;
    }
    return out;
  }

  // The values a required property must take in an object branch (nullopt: unconstrained).
  static std::optional<std::vector<json>> tag_values(const json& s, const std::string& name) {
    if (!s.is_object() || !s.contains("required") || !s.at("required").is_array() || !s.contains("properties"))
      return std::nullopt;
    if (std::find(s.at("required").begin(), s.at("required").end(), json(name)) == s.at("required").end())
      return std::nullopt;
    const json& props = s.at("properties");
    if (!props.is_object() || !props.contains(name) || !props.at(name).is_object()) return std::nullopt;
    const json& p = props.at(name);
    if (p.contains("const")) return std::vector<json>{p.at("const")};
    if (p.contains("enum") && p.at("enum").is_array()) return std::vector<json>(p.at("enum").begin(), p.at("enum").end());
    return std::nullopt;
  }

  // Whether no value can match both: different types, different const/enum
  // values, or objects told apart by a required property's values.
  bool disjoint(const json& a0, const json& b0) const {
    const json& a = resolved(a0);
    const json& b = resolved(b0);
    const auto ta = branch_types(a), tb = branch_types(b);
    if (ta && tb) {
      bool shared = false;
      for (const std::string& x : *ta) shared = shared || in(*tb, x);
      if (!shared) return true;
    }
    auto values = [](const json& s) -> std::optional<std::vector<json>> {
      if (!s.is_object()) return std::nullopt;
      if (s.contains("const")) return std::vector<json>{s.at("const")};
      if (s.contains("enum") && s.at("enum").is_array()) return std::vector<json>(s.at("enum").begin(), s.at("enum").end());
      return std::nullopt;
    };
    auto apart = [](const std::vector<json>& x, const std::vector<json>& y) {
      for (const json& v : x)
        if (std::find(y.begin(), y.end(), v) != y.end()) return false;
      return true;
    };
    if (const auto va = values(a), vb = values(b); va && vb) return apart(*va, *vb);
    if (a.is_object() && a.contains("properties") && a.at("properties").is_object())
      for (const auto& [name, p] : a.at("properties").items()) {
        const auto x = tag_values(a, name), y = tag_values(b, name);
        if (x && y && apart(*x, *y)) return true;
      }
    return false;
  }

  static uint64_t count(const json& s, const char* k, const std::string& ptr) {
    const json& v = s.at(k);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      not_schema(ptr + "/" + k, fmt::format("'{}' is a whole number >= 0, not {}", k, json_kind(v)));
    return v.get<uint64_t>();
  }

  void string_keywords(const json& s, const std::string& ptr) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    const uint64_t lo = s.contains("minLength") ? count(s, "minLength", ptr) : 0;
    if (s.contains("maxLength") && count(s, "maxLength", ptr) < lo)
      empty_language(ptr + "/maxLength", "maxLength below minLength");
    if (s.contains("pattern") && s.contains("format"))
      unsupported(ptr + "/pattern", "'pattern' beside 'format' is not supported");
    for (const char* k : {"pattern", "format"}) {
      if (!s.contains(k)) continue;
      const json& v = s.at(k);
      const std::string at = ptr + "/" + k;
      if (!v.is_string()) not_schema(at, fmt::format("'{}' is a string, not {}", k, json_kind(v)));
      if (lengths) unsupported(at, fmt::format("'{}' beside minLength/maxLength is not supported", k));
      if (std::string_view(k) == "format" && !in(kFormats, v.get<std::string>()))
        unsupported(at, fmt::format("format \"{}\" is not supported", v.get<std::string>()));
    }
  }

  static void number_keywords(const json& s, const std::string& ptr, bool integer) {
    std::optional<double> lo, hi;
    bool lo_open = false, hi_open = false;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const json& v = s.at(k);
      if (!v.is_number())
        not_schema(ptr + "/" + k, fmt::format("'{}' is a number, not {}", k, json_kind(v)));
      const double x = v.get<double>();
      const std::string_view name(k);
      const bool open = name.starts_with("exclusive");
      if (name.ends_with("inimum") && (!lo || x > *lo || (x == *lo && open))) lo = x, lo_open = open;
      if (name.ends_with("aximum") && (!hi || x < *hi || (x == *hi && open))) hi = x, hi_open = open;
    }
    if (!lo || !hi) return;
    if (integer) {
      const double a = lo_open ? std::floor(*lo) + 1 : std::ceil(*lo);
      const double b = hi_open ? std::ceil(*hi) - 1 : std::floor(*hi);
      if (a > b) empty_language(ptr, "an integer range with no integer in it");
    } else if (*lo > *hi || (*lo == *hi && (lo_open || hi_open))) {
      empty_language(ptr, "an empty number range");
    }
  }

  void array_keywords(const json& s, const std::string& ptr, int depth) {
    const uint64_t lo = s.contains("minItems") ? count(s, "minItems", ptr) : 0;
    if (s.contains("maxItems") && count(s, "maxItems", ptr) < lo)
      empty_language(ptr + "/maxItems", "maxItems below minItems");
    size_t prefix = 0;
    if (s.contains("prefixItems")) {
      const json& p = s.at("prefixItems");
      if (!p.is_array()) not_schema(ptr + "/prefixItems", fmt::format("'prefixItems' is an array of schemas, not {}", json_kind(p)));
      prefix = p.size();
      for (size_t i = 0; i < p.size(); ++i) schema(p[i], fmt::format("{}/prefixItems/{}", ptr, i), depth + 1, false);
    }
    if (s.contains("items")) {
      const json& it = s.at("items");
      if (it.is_array()) unsupported(ptr + "/items", "'items' as an array (draft 4 tuples) is not supported: use 'prefixItems'");
      schema(it, ptr + "/items", depth + 1, true);
      if (it == json(false) && lo > prefix) empty_language(ptr + "/minItems", "minItems beyond the items allowed");
    }
  }

  void object_keywords(const json& s, const std::string& ptr, int depth) {
    const json* props = nullptr;
    if (s.contains("properties")) {
      props = &s.at("properties");
      if (!props->is_object())
        not_schema(ptr + "/properties", fmt::format("'properties' is an object of schemas, not {}", json_kind(*props)));
      for (const auto& [name, p] : props->items()) schema(p, ptr + "/properties/" + escape_token(name), depth + 1, false);
    }
    // Without additionalProperties, no other property is produced (the
    // engine's strict mode: a narrower language, every value of it valid).
    bool others = false;
    if (s.contains("additionalProperties")) {
      const json& a = s.at("additionalProperties");
      schema(a, ptr + "/additionalProperties", depth + 1, true);
      others = a != json(false);
    }
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) not_schema(ptr + "/required", fmt::format("'required' is an array of names, not {}", json_kind(r)));
      for (size_t i = 0; i < r.size(); ++i) {
        const std::string at = fmt::format("{}/required/{}", ptr, i);
        if (!r[i].is_string()) not_schema(at, fmt::format("a required name is a string, not {}", json_kind(r[i])));
        if (!others && (props == nullptr || !props->contains(r[i].get<std::string>())))
          empty_language(at, fmt::format("required property \"{}\" not in 'properties'", r[i].get<std::string>()));
      }
    }
  }

  const json& root_;
};

}  // namespace

void check_schema(const json& schema) {
  if (schema.is_boolean() && !schema.get<bool>()) empty_language("", "the schema is false");
  Walk(schema).schema(schema, "", 0, false);
}

}  // namespace tally::grammar
