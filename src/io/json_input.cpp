#include "io/json_input.h"

#include <fmt/format.h>

#include <utility>

#include "core/error.h"
#include "core/printable.h"

namespace tally {

using nlohmann::json;

std::string describe_json(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return fmt::format("an object of {} keys", v.size());
    case json::value_t::array: return fmt::format("an array of {} items", v.size());
    case json::value_t::string: return fmt::format("the string \"{}\"", excerpt(v.get_ref<const std::string&>(), 40));
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer: return fmt::format("{}", v.get<int64_t>());
    case json::value_t::number_unsigned: return fmt::format("{}", v.get<uint64_t>());
    case json::value_t::number_float: return fmt::format("{}", v.get<double>());
    default: return v.type_name();
  }
}

json parse_json_input(const std::string& text, const std::string& source) {
  const json::parser_callback_t limit_depth = [&source](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      fail("{}: JSON nested deeper than {} levels", source, kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::exception& e) {
    PrintableOptions o;
    o.max_bytes = 160;
    o.escape_quotes = false;
    fail("{}: not valid JSON: {}", source, printable(e.what(), o));
  }
}

JsonFields::JsonFields(const json& j, std::string source, std::string prefix)
    : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!j.is_object()) fail("{}: must be a JSON object, not {}", source_, describe_json(j));
}

const json* JsonFields::find(const char* key) const {
  const auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

std::optional<uint64_t> JsonFields::count(const char* key, uint64_t max) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned() || v->get<uint64_t>() == 0)
    fail("{}: '{}{}' must be a positive whole number, not {}", source_, prefix_, key, describe_json(*v));
  if (v->get<uint64_t>() > max) fail("{}: '{}{}' = {} is too large", source_, prefix_, key, describe_json(*v));
  return v->get<uint64_t>();
}

std::optional<double> JsonFields::number(const char* key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail("{}: '{}{}' must be a number, not {}", source_, prefix_, key, describe_json(*v));
  return v->get<double>();
}

std::optional<bool> JsonFields::flag(const char* key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail("{}: '{}{}' must be true or false, not {}", source_, prefix_, key, describe_json(*v));
  return v->get<bool>();
}

std::optional<std::string> JsonFields::string(const char* key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail("{}: '{}{}' must be a string, not {}", source_, prefix_, key, describe_json(*v));
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> JsonFields::strings(const char* key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    fail("{}: '{}{}' must be a list of strings, not {}", source_, prefix_, key, describe_json(*v));
  std::vector<std::string> out;
  for (const json& e : *v) {
    if (!e.is_string())
      fail("{}: '{}{}' must be a list of strings; it holds {}", source_, prefix_, key, describe_json(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

void JsonFields::missing(const char* key, const char* needed_for) const {
  fail("{}: missing '{}{}' (needed for {})", source_, prefix_, key, needed_for);
}

}  // namespace tally
