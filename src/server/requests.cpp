#include "server/requests.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "server/api_error.h"

namespace tally::server {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxDepth = 64;

// The fields each endpoint takes. Any other (non-null) field is a 400, as
// OpenAI answers it: a field tally would not honor (tools, suffix) is never
// dropped without a word. "user" only labels the caller.
constexpr std::array kSamplingFields = {"model",         "max_tokens",       "max_completion_tokens", "temperature",
                                        "top_p",         "top_k",            "min_p",                 "n",
                                        "seed",          "stop",             "presence_penalty",      "frequency_penalty",
                                        "stream",        "stream_options",   "logit_bias",            "logprobs",
                                        "user",          "response_format",  "speculate",             "draft_max"};
constexpr std::array kChatFields = {"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"};
constexpr std::array kCompletionFields = {"prompt"};
constexpr std::array kEmbeddingFields = {"model", "input", "encoding_format", "dimensions", "user"};

// Why a known OpenAI field is not taken, where a reason says more than "unknown".
const char* unsupported_reason(std::string_view k) {
  if (k == "functions" || k == "function_call") return "the deprecated function-call fields are not supported: use 'tools'";
  if (k == "tools" || k == "tool_choice" || k == "parallel_tool_calls") return "tools are taken by chat completions only";
  if (k == "suffix" || k == "echo" || k == "best_of") return "it is not supported";
  if (k == "modalities" || k == "audio") return "only text is supported";
  return nullptr;
}

template <class... Lists>
void refuse_unknown_fields(const json& b, const Lists&... lists) {
  for (const auto& [k, v] : b.items()) {
    if (v.is_null()) continue;
    const bool known = (... || (std::find(lists.begin(), lists.end(), std::string_view(k)) != lists.end()));
    if (known) continue;
    const std::string name = excerpt(k, 64);
    if (const char* why = unsupported_reason(k)) bad_request(name, "'{}': {}", name, why);
    bad_request(name, "'{}' is not a field of this request", name);
  }
}

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (!v->is_number()) bad_request(name, "'{}' must be a number, not {}", name, json_type(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad_request(name, "'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return x;
}

int64_t integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v->is_number_integer()) bad_request(name, "'{}' must be a whole number, not {}", name, json_type(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad_request(name, "'{}' must be between {} and {}", name, lo, hi);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad_request(name, "'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return x;
}

bool boolean(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v->is_boolean()) bad_request(name, "'{}' must be true or false, not {}", name, json_type(*v));
  return v->get<bool>();
}

// OpenAI's logit_bias: {"token id": bias}, each bias from -100 to 100,
// added to the token's logit.
void logit_bias(const json& b, int32_t n_vocab, GenerationRequest& r) {
  const json* lb = field(b, "logit_bias");
  if (!lb) return;
  if (!lb->is_object())
    bad_request("logit_bias", "'logit_bias' must be an object of token id -> bias, not {}", json_type(*lb));
  for (const auto& [key, v] : lb->items()) {
    const auto id = parse_whole(key);
    if (!id || *id >= static_cast<uint64_t>(n_vocab))
      bad_request("logit_bias", "'logit_bias' keys must be token ids from 0 to {}, not \"{}\"", n_vocab - 1,
                  excerpt(key, 32));
    if (!v.is_number())
      bad_request("logit_bias", "'logit_bias' values must be numbers, not {} (token {})", json_type(v), *id);
    const double bias = v.get<double>();
    if (!(bias >= -100 && bias <= 100))
      bad_request("logit_bias", "'logit_bias' values must be between -100 and 100, got {} (token {})", bias, *id);
    r.sampling.logit_bias.emplace_back(static_cast<int32_t>(*id), static_cast<float>(bias));
  }
}

ResponseFormat response_format(const json& b);

// What chat and completions share: sampling, limits, stop strings, streaming, the response format.
void common_fields(const json& b, GenerationRequest& r) {
  if (const json* m = field(b, "model")) {
    if (!m->is_string()) bad_request("model", "'model' must be a string, not {}", json_type(*m));
    r.model = m->get<std::string>();
  }
  // OpenAI's defaults: temperature 1, top_p 1, no top-k or min-p.
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.min_p = 0;
  if (field(b, "temperature")) r.sampling.temperature = static_cast<float>(number(b, "temperature", 0, 2));
  if (field(b, "top_p")) {
    r.sampling.top_p = static_cast<float>(number(b, "top_p", 0, 1));
    if (r.sampling.top_p <= 0) bad_request("top_p", "'top_p' must be greater than 0");
  }
  if (field(b, "top_k")) r.sampling.top_k = static_cast<int32_t>(integer(b, "top_k", 0, 1 << 20));
  if (field(b, "min_p")) r.sampling.min_p = static_cast<float>(number(b, "min_p", 0, 0.999999));
  if (field(b, "presence_penalty")) r.sampling.presence_penalty = static_cast<float>(number(b, "presence_penalty", -2, 2));
  if (field(b, "frequency_penalty"))
    r.sampling.frequency_penalty = static_cast<float>(number(b, "frequency_penalty", -2, 2));
  if (field(b, "seed")) {
    const json* v = field(b, "seed");
    if (!v->is_number_integer()) bad_request("seed", "'seed' must be a whole number, not {}", json_type(*v));
    r.sampling.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    r.seeded = true;
  }
  if (field(b, "n")) r.n = static_cast<int>(integer(b, "n", 1, 16));
  if (const json* v = field(b, "speculate")) {
    if (!v->is_string() || (*v != "lookup" && *v != "draft" && *v != "off"))
      bad_request("speculate", "'speculate' must be \"lookup\", \"draft\" or \"off\", not {}",
                  v->is_string() ? "'" + excerpt(v->get_ref<const std::string&>()) + "'" : std::string(json_type(*v)));
    r.speculate = v->get<std::string>();
  }
  if (field(b, "draft_max")) r.draft_max = integer(b, "draft_max", 1, 64);
  for (const char* name : {"max_completion_tokens", "max_tokens"})
    if (field(b, name)) {
      r.max_tokens = integer(b, name, 1, int64_t{1} << 30);
      break;
    }
  if (const json* s = field(b, "stop")) {
    auto add = [&](const json& v) {
      if (!v.is_string()) bad_request("stop", "'stop' must be a string or a list of strings, not a list holding {}", json_type(v));
      if (v.get<std::string>().empty()) bad_request("stop", "'stop' strings must not be empty");
      r.stop.push_back(v.get<std::string>());
    };
    if (s->is_string()) {
      add(*s);
    } else if (s->is_array()) {
      if (s->size() > 4) bad_request("stop", "'stop' takes at most 4 strings, got {}", s->size());
      for (const json& v : *s) add(v);
    } else {
      bad_request("stop", "'stop' must be a string or a list of strings, not {}", json_type(*s));
    }
  }
  r.format = response_format(b);
  if (field(b, "stream")) r.stream = boolean(b, "stream");
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object, not {}", json_type(*so));
    if (field(*so, "include_usage")) {
      const json* v = field(*so, "include_usage");
      if (!v->is_boolean())
        bad_request("stream_options.include_usage", "'stream_options.include_usage' must be true or false");
      r.include_usage = v->get<bool>();
    }
  }
}

// response_format: {"type": "text"}, {"type": "json_object"}, or
// {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}.
ResponseFormat response_format(const json& b) {
  ResponseFormat f;
  const json* rf = field(b, "response_format");
  if (!rf) return f;
  if (!rf->is_object()) bad_request("response_format", "'response_format' must be an object, not {}", json_type(*rf));
  const json* type = field(*rf, "type");
  if (!type || !type->is_string())
    bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = type->get<std::string>();
  auto only = [&](std::initializer_list<std::string_view> keys) {
    for (const auto& [k, v] : rf->items())
      if (!v.is_null() && std::find(keys.begin(), keys.end(), k) == keys.end()) {
        const std::string name = "response_format." + excerpt(k, 64);
        bad_request(name, "'{}' is not a field of a \"{}\" response format", name, excerpt(t, 32));
      }
  };
  if (t == "text") {
    only({"type"});
    return f;
  }
  if (t == "json_object") {
    only({"type"});
    f.kind = ResponseFormat::Kind::JsonObject;
    return f;
  }
  if (t != "json_schema")
    bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"{}\"",
                excerpt(t, 32));
  only({"type", "json_schema"});
  const json* js = field(*rf, "json_schema");
  if (!js || !js->is_object())
    bad_request("response_format.json_schema", "'response_format.json_schema' must be an object holding 'name' and 'schema'");
  for (const auto& [k, v] : js->items()) {
    const std::string name = "response_format.json_schema." + excerpt(k, 64);
    if (k == "name") {
      // OpenAI's rule for the name: 1 to 64 of a-z, A-Z, 0-9, _ and -.
      const bool ok = v.is_string() && !v.get_ref<const std::string&>().empty() && v.get_ref<const std::string&>().size() <= 64 &&
                      std::all_of(v.get_ref<const std::string&>().begin(), v.get_ref<const std::string&>().end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                      });
      if (!ok) bad_request(name, "'{}' must be 1 to 64 letters, digits, '_' or '-'", name);
    } else if (k == "description") {
      if (!v.is_string() && !v.is_null()) bad_request(name, "'{}' must be a string, not {}", name, json_type(v));
    } else if (k == "strict") {
      // Output always follows the schema; strict: false asks for no less.
      if (!v.is_boolean() && !v.is_null()) bad_request(name, "'{}' must be true or false, not {}", name, json_type(v));
    } else if (k != "schema") {
      bad_request(name, "'{}' is not a field of 'response_format.json_schema'", name);
    }
  }
  if (!field(*js, "name")) bad_request("response_format.json_schema.name", "'response_format.json_schema.name' is required");
  const json* schema = field(*js, "schema");
  if (!schema) bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  // Checked here for the 400; compiled by the server for the model's vocabulary.
  try {
    grammar::check_schema(*schema);
  } catch (const Error& e) {
    bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema': {}", e.what());
  }
  f.kind = ResponseFormat::Kind::JsonSchema;
  return f;
}

std::string message_text(const json& content, size_t i) {
  const std::string param = fmt::format("messages[{}].content", i);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, "'{}' must be a string or a list of text parts, not {}", param, json_type(content));
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad_request(param, "'{}' parts must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)", param);
    text += part["text"].get<std::string>();
  }
  return text;
}

constexpr const char* kNoToolsTemplate = "the model's chat template does not support tools";

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

// A string field of an object, or a 400 naming it ("" when absent and optional).
std::string string_at(const json& obj, const char* key, const std::string& at, bool required) {
  const json* v = field(obj, key);
  if (!v) {
    if (required) bad_request(at + "." + key, "'{}.{}' is required", at, key);
    return {};
  }
  if (!v->is_string()) bad_request(at + "." + key, "'{}.{}' must be a string, not {}", at, key, json_type(*v));
  return v->get<std::string>();
}

// tools, tool_choice, parallel_tool_calls: checked, and kept in r; the declared names.
std::vector<std::string> tool_definitions(const json& b, const ToolSupport& support, GenerationRequest& r) {
  std::vector<std::string> names;
  const json* tools = field(b, "tools");
  if (tools) {
    if (!tools->is_array()) bad_request("tools", "'tools' must be a list of tools, not {}", json_type(*tools));
    if (tools->empty()) bad_request("tools", "'tools' must hold at least one tool (leave it out for none)");
    if (!support.shows_tools) bad_request("tools", "'tools': {}", kNoToolsTemplate);
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!t.is_object()) bad_request(at, "'{}' must be an object, not {}", at, json_type(t));
      if (string_at(t, "type", at, true) != "function")
        bad_request(at + ".type", "'{}.type' must be \"function\" (the only kind of tool)", at);
      const json* fn = field(t, "function");
      if (!fn) bad_request(at + ".function", "'{}.function' is required", at);
      if (!fn->is_object()) bad_request(at + ".function", "'{}.function' must be an object, not {}", at, json_type(*fn));
      const std::string fat = at + ".function";
      const std::string name = string_at(*fn, "name", fat, true);
      if (!valid_tool_name(name))
        bad_request(fat + ".name", "'{}.name' must be 1 to 64 letters, digits, '_' or '-', not \"{}\"", fat,
                    excerpt(name, 64));
      if (std::find(names.begin(), names.end(), name) != names.end())
        bad_request(fat + ".name", "'{}.name': \"{}\" names two tools", fat, name);
      string_at(*fn, "description", fat, false);
      if (const json* p = field(*fn, "parameters")) {
        if (!p->is_object())
          bad_request(fat + ".parameters", "'{}.parameters' must be a JSON schema object, not {}", fat, json_type(*p));
        if (const json* ty = field(*p, "type"); ty && *ty != "object")
          bad_request(fat + ".parameters.type", "'{}.parameters' must describe an object (\"type\": \"object\")", fat);
      }
      if (const json* st = field(*fn, "strict"); st && !st->is_boolean())
        bad_request(fat + ".strict", "'{}.strict' must be true or false, not {}", fat, json_type(*st));
      names.push_back(name);
    }
    r.tools = *tools;
  }
  bool parse_calls = tools != nullptr;
  if (const json* c = field(b, "tool_choice")) {
    if (c->is_string()) {
      const std::string v = c->get<std::string>();
      if (v == "none") {
        parse_calls = false;  // the tools stay in the prompt (as llama.cpp and vLLM render them); the reply is text
      } else if (v == "required") {
        r.call_required = true;
      } else if (v != "auto") {
        bad_request("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a named function, not \"{}\"",
                    excerpt(v, 32));
      }
    } else if (c->is_object()) {
      if (string_at(*c, "type", "tool_choice", true) != "function")
        bad_request("tool_choice.type", "'tool_choice.type' must be \"function\"");
      const json* fn = field(*c, "function");
      if (!fn || !fn->is_object()) bad_request("tool_choice.function", "'tool_choice.function' must be an object with a name");
      r.call_name = string_at(*fn, "name", "tool_choice.function", true);
      if (std::find(names.begin(), names.end(), r.call_name) == names.end())
        bad_request("tool_choice.function.name", "'tool_choice.function.name': \"{}\" is not one of the request's tools",
                    excerpt(r.call_name, 64));
      r.call_required = true;
    } else {
      bad_request("tool_choice", "'tool_choice' must be a string or an object, not {}", json_type(*c));
    }
    // As OpenAI answers it: a choice among no tools would be ignored.
    if (!tools) bad_request("tool_choice", "'tool_choice' needs 'tools': there are no tools to choose from");
  }
  bool parallel = true;
  if (field(b, "parallel_tool_calls")) {
    parallel = boolean(b, "parallel_tool_calls");
    if (!tools) bad_request("parallel_tool_calls", "'parallel_tool_calls' needs 'tools'");
  }
  r.parallel_calls = parallel;
  if (parse_calls) {
    // A named choice: only that function's calls are calls.
    std::vector<std::string> callable = r.call_name.empty() ? names : std::vector<std::string>{r.call_name};
    r.tool_calls.emplace(support.format, std::move(callable), parallel);
  }
  return names;
}

// An assistant message's tool_calls as the template sees them: arguments as
// objects where the JSON string holds one (as vLLM passes them; templates
// such as Qwen's and Llama's write them with tojson).
json message_tool_calls(const json& calls, const std::string& at) {
  if (!calls.is_array()) bad_request(at, "'{}' must be a list, not {}", at, json_type(calls));
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const std::string cat = fmt::format("{}[{}]", at, k);
    if (!c.is_object()) bad_request(cat, "'{}' must be an object, not {}", cat, json_type(c));
    const std::string id = string_at(c, "id", cat, true);
    if (string_at(c, "type", cat, true) != "function") bad_request(cat + ".type", "'{}.type' must be \"function\"", cat);
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) bad_request(cat + ".function", "'{}.function' must be an object", cat);
    const std::string fat = cat + ".function";
    const std::string name = string_at(*fn, "name", fat, true);
    const std::string args = string_at(*fn, "arguments", fat, true);
    json parsed = json::parse(args, nullptr, /*allow_exceptions=*/false);
    json arguments = parsed.is_object() ? std::move(parsed) : json(args);
    out.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(arguments)}}}});
  }
  return out;
}

ChatMessage chat_message(const json& msg, size_t i, const ToolSupport& support) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!msg.is_object()) bad_request(at, "'{}' must be an object, not {}", at, json_type(msg));
  const json* role = field(msg, "role");
  if (!role || !role->is_string()) bad_request(at + ".role", "'{}.role' must be a string", at);
  std::string rs = role->get<std::string>();
  if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
  if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
    bad_request(at + ".role", "'{}.role' must be system, developer, user, assistant or tool", at);
  ChatMessage cm;
  cm.role = rs;
  const json* calls = rs == "assistant" ? field(msg, "tool_calls") : nullptr;
  if (calls && !(calls->is_array() && calls->empty())) {
    if (!support.shows_tools) bad_request(at + ".tool_calls", "'{}.tool_calls': {}", at, kNoToolsTemplate);
    cm.tool_calls = message_tool_calls(*calls, at + ".tool_calls");
  }
  if (rs == "tool") {
    if (!support.shows_tools) bad_request(at + ".role", "'{}.role' is tool: {}", at, kNoToolsTemplate);
    cm.tool_call_id = string_at(msg, "tool_call_id", at, true);
    if (cm.tool_call_id.empty()) bad_request(at + ".tool_call_id", "'{}.tool_call_id' must not be empty", at);
    cm.name = string_at(msg, "name", at, false);
  }
  const json* content = field(msg, "content");
  if (content)
    cm.content = message_text(*content, i);
  else if (cm.tool_calls.is_null())  // an assistant message that calls tools may have no text
    bad_request(at + ".content", "'{}.content' is required", at);
  return cm;
}

}  // namespace

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw ApiError(400, "invalid_request_error", "the JSON body nests deeper than 64 levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw ApiError(400, "invalid_request_error", fmt::format("the body is not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "invalid_request_error", fmt::format("the body must be a JSON object, not {}", json_type(j)));
  return j;
}

GenerationRequest parse_chat_request(const json& b, const Tokenizer& tok, const ChatTemplate& tmpl,
                                     const ToolSupport& support) {
  refuse_unknown_fields(b, kSamplingFields, kChatFields);
  GenerationRequest r;
  r.chat = true;
  const json* m = field(b, "messages");
  if (!m) bad_request("messages", "'messages' is required");
  if (!m->is_array()) bad_request("messages", "'messages' must be an array, not {}", json_type(*m));
  if (m->empty()) bad_request("messages", "'messages' must hold at least one message");
  const std::vector<std::string> names = tool_definitions(b, support, r);
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < m->size(); ++i) msgs.push_back(chat_message((*m)[i], i, support));
  common_fields(b, r);
  logit_bias(b, tok.n_vocab(), r);
  if (field(b, "logprobs")) r.logprobs = boolean(b, "logprobs");
  if (field(b, "top_logprobs")) {
    r.top_logprobs = static_cast<int>(integer(b, "top_logprobs", 0, 20));
    if (!r.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  // Message contents are text: a message spelling a control token cannot forge the template's markup.
  r.prompt = tmpl.encode(tok, msgs, true, r.tools);
  if (r.prompt.empty()) bad_request("messages", "the messages render to no tokens");
  return r;
}

GenerationRequest parse_completion_request(const json& b, const Tokenizer& tok) {
  refuse_unknown_fields(b, kSamplingFields, kCompletionFields);
  GenerationRequest r;
  r.chat = false;
  const json* p = field(b, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt = tok.encode(p->get<std::string>(), /*add_special=*/true, /*parse_special=*/false);
  } else if (p->is_array()) {
    for (const json& v : *p) {
      if (!v.is_number_integer())
        bad_request("prompt", "'prompt' must be a string or a list of token ids, not a list holding {}", json_type(v));
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tok.n_vocab()) bad_request("prompt", "token id {} is outside the vocabulary [0, {})", id, tok.n_vocab());
      r.prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    bad_request("prompt", "'prompt' must be a string or a list of token ids, not {}", json_type(*p));
  }
  if (r.prompt.empty()) bad_request("prompt", "'prompt' has no tokens");
  common_fields(b, r);
  logit_bias(b, tok.n_vocab(), r);
  if (field(b, "logprobs")) {  // the completions API: the number of alternatives
    r.top_logprobs = static_cast<int>(integer(b, "logprobs", 0, 5));
    r.logprobs = true;
  }
  return r;
}

EmbeddingRequest parse_embedding_request(const json& b, const Tokenizer& tok, int64_t n_embd) {
  refuse_unknown_fields(b, kEmbeddingFields);
  if (field(b, "model") && !field(b, "model")->is_string())
    bad_request("model", "'model' must be a string, not {}", json_type(*field(b, "model")));
  EmbeddingRequest r;
  if (const json* f = field(b, "encoding_format")) {
    if (*f == "base64")
      r.base64 = true;
    else if (*f != "float")
      bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\", not {}",
                  f->is_string() ? "\"" + excerpt(f->get_ref<const std::string&>(), 32) + "\"" : json_type(*f));
  }
  // A mean-pooled embedding cannot be shortened the way OpenAI's
  // Matryoshka-trained models can: only the model's own size is served.
  if (field(b, "dimensions") && integer(b, "dimensions", 1, INT64_MAX) != n_embd)
    bad_request("dimensions", "'dimensions' must be this model's embedding size, {}: its embeddings cannot be shortened",
                n_embd);
  const json* in = field(b, "input");
  if (!in) bad_request("input", "'input' is required");
  std::vector<std::string> texts;
  if (in->is_string()) {
    texts.push_back(in->get<std::string>());
  } else if (in->is_array()) {
    if (in->empty()) bad_request("input", "'input' must hold at least one string");
    if (in->size() > 256) bad_request("input", "'input' takes at most 256 strings, got {}", in->size());
    for (const json& v : *in) {
      if (!v.is_string()) bad_request("input", "'input' must be a string or a list of strings, not a list holding {}", json_type(v));
      texts.push_back(v.get<std::string>());
    }
  } else {
    bad_request("input", "'input' must be a string or a list of strings, not {}", json_type(*in));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    r.inputs.push_back(tok.encode(texts[i], /*add_special=*/true, /*parse_special=*/false));
    if (r.inputs.back().empty()) bad_request("input", "input {} has no tokens", i);
  }
  return r;
}

nlohmann::json embedding_value(std::span<const float> v, const EmbeddingRequest& r) {
  if (!r.base64) return nlohmann::json(std::vector<float>(v.begin(), v.end()));
  // OpenAI's base64: the little-endian float32 bytes (x86-64 stores them so).
  static_assert(std::endian::native == std::endian::little);
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}

}  // namespace tally::server
