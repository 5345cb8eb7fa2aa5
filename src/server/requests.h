#pragma once
// The OpenAI request bodies the server takes, parsed and checked: every
// field with a wrong type or an out-of-range value, and every field the
// endpoint does not take, is refused with a 400 naming it (ApiError), before
// anything is queued. Untrusted input: JSON is
// parsed with a nesting limit, and error messages quote a value's type,
// never the value.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_kind.h"
#include "grammar/grammar.h"
#include "sampler/sampler.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tally::server {

// OpenAI's response_format: text, any JSON object, or JSON valid against a
// schema (checked by grammar::check_schema when parsed; the server compiles
// it for the model's vocabulary from the body, whose objects keep the
// client's key order: a schema's properties are generated in that order).
struct ResponseFormat {
  enum class Kind { Text, JsonObject, JsonSchema };
  Kind kind = Kind::Text;
};

struct GenerationRequest {
  bool chat = true;
  std::string model;
  std::vector<int32_t> prompt;
  int n = 1;
  int64_t max_tokens = -1;  // -1: until the context (within the server's cap)
  SamplerParams sampling;
  bool seeded = false;       // a seed was given: results are reproducible
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;
  // Chat with tools: the request's tool definitions (null when none), and
  // the parser of the reply's calls (unset: the reply is all content, as
  // with tool_choice "none").
  nlohmann::ordered_json tools;
  std::optional<ToolCallParser> tool_calls;
  // tool_choice "required" or a named function: the reply must be a call.
  bool call_required = false;
  std::string call_name;  // the function a named tool_choice asks for ("" : any)
  bool parallel_calls = true;  // parallel_tool_calls: a reply may hold several calls
  ResponseFormat format;
  // The grammar the reply must follow, compiled by the server for the
  // model's vocabulary: a required call (server/tool_calls.h
  // call_constraint) or the response format's; none: any text.
  std::optional<grammar::Constraint> constraint;
  // Extensions: speculative decoding ("lookup", "draft" or "off"; "": the
  // server's default), and at most how many guesses a step verifies (0: the server's).
  std::string speculate;
  int64_t draft_max = 0;
};

// What the model's chat template can do with tools.
struct ToolSupport {
  bool shows_tools = false;  // the template writes the tools into the prompt
  ToolFormat format = ToolFormat::Json;
};

// The body as JSON: a 400 for malformed JSON, a nesting deeper than 64, or a
// body that is not an object.
// Objects keep their keys in the body's order, as the chat template sees them.
nlohmann::ordered_json parse_body(std::string_view body);

// POST /v1/chat/completions: messages rendered with the model's chat template.
// tools, tool_choice and parallel_tool_calls need a template that shows tools.
GenerationRequest parse_chat_request(const nlohmann::ordered_json& body, const Tokenizer& tok, const ChatTemplate& tmpl,
                                     const ToolSupport& tools);
// POST /v1/completions: prompt as a string or a list of token ids.
GenerationRequest parse_completion_request(const nlohmann::ordered_json& body, const Tokenizer& tok);
// POST /v1/embeddings: input as a string or a list of strings, each
// tokenized; encoding_format "float" or "base64"; dimensions only as the
// model's own size (n_embd).
struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;  // each vector as the base64 of its little-endian float32 bytes
};
EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body, const Tokenizer& tok, int64_t n_embd);
// One embedding in the request's encoding: a list of numbers, or a base64 string.
nlohmann::json embedding_value(std::span<const float> v, const EmbeddingRequest& r);

// "a string", "an array", ... for error messages.
inline std::string json_type(nlohmann::json::value_t t) { return json_kind(t); }
inline std::string json_type(const nlohmann::json& v) { return json_kind(v.type()); }
inline std::string json_type(const nlohmann::ordered_json& v) { return json_kind(v.type()); }

}  // namespace tally::server
