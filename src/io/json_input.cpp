#include "io/json_input.h"

#include <fmt/format.h>

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

}  // namespace tally
