#pragma once
// JSON from outside (config.json, tokenizer.json, a safetensors header):
// parsed with a nesting limit, and described in errors by type and a short
// excerpt, never printed whole (a value may be megabytes, or nested too
// deeply to print without exhausting the stack).
#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tally {

// Real files nest a few levels (text_config, rope_scaling, pre_tokenizer sequences).
inline constexpr int kMaxJsonDepth = 64;

// Throws tally::Error naming `source` when the text is not JSON or nests
// deeper than kMaxJsonDepth (refused while parsing, before any recursive walk).
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

// What a value is, for an error message: its type, and a scalar's value cut short.
std::string describe_json(const nlohmann::json& v);

// The fields of one JSON object, typed, with errors that name the source and
// the field as prefix + key ("config.json: 'text_config.head_dim' must be ...").
// An absent key and a null are the same: nullopt. Holds a reference: the
// object must outlive it.
class JsonFields {
 public:
  // Throws unless j is an object.
  JsonFields(const nlohmann::json& j, std::string source, std::string prefix = {});

  const nlohmann::json* find(const char* key) const;
  // A whole number from 1 to max.
  std::optional<uint64_t> count(const char* key, uint64_t max = UINT64_MAX) const;
  std::optional<double> number(const char* key) const;
  std::optional<bool> flag(const char* key) const;
  std::optional<std::string> string(const char* key) const;
  std::optional<std::vector<std::string>> strings(const char* key) const;
  // Throws naming the field and what it is needed for when `v` is empty.
  template <class T>
  T required(std::optional<T> v, const char* key, const char* needed_for) const {
    if (!v) missing(key, needed_for);
    return *v;
  }

  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }

 private:
  [[noreturn]] void missing(const char* key, const char* needed_for) const;
  const nlohmann::json& j_;
  std::string source_;
  std::string prefix_;
};

}  // namespace tally
