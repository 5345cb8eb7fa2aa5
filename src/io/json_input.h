#pragma once
// JSON from outside (config.json, tokenizer.json, a safetensors header):
// parsed with a nesting limit, and described in errors by type and a short
// excerpt, never printed whole (a value may be megabytes, or nested too
// deeply to print without exhausting the stack).
#include <nlohmann/json.hpp>
#include <string>

namespace tally {

// Real files nest a few levels (text_config, rope_scaling, pre_tokenizer sequences).
inline constexpr int kMaxJsonDepth = 64;

// Throws tally::Error naming `source` when the text is not JSON or nests
// deeper than kMaxJsonDepth (refused while parsing, before any recursive walk).
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

// What a value is, for an error message: its type, and a scalar's value cut short.
std::string describe_json(const nlohmann::json& v);

}  // namespace tally
