#include "server/tool_calls.h"

#include <algorithm>
#include <mutex>
#include <random>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace tally::server {

using nlohmann::json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr int kMaxDepth = 64;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

bool blank(std::string_view s) { return skip_space(s, 0) == s.size(); }

// Where the JSON object or array that starts at s[from] ends (one past its
// closing bracket), or npos when it does not close in s. Strings are skipped
// with their escapes; whether the text between is JSON is left to the parser.
size_t json_extent(std::string_view s, size_t from) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return std::string_view::npos;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// The JSON value of `s`, or a discarded value when it is not JSON.
json parse_json(std::string_view s) {
  return json::parse(
      s,
      [](int depth, json::parse_event_t, json&) {
        if (depth > kMaxDepth) throw std::runtime_error("nests too deep");
        return true;
      },
      /*allow_exceptions=*/false);
}

json parse_json_guarded(std::string_view s) {
  try {
    return parse_json(s);
  } catch (const std::runtime_error&) {
    return json(json::value_t::discarded);
  }
}

// The longest tail of `s` that is a proper beginning of `marker`.
size_t partial_tail(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (marker.substr(0, n) == s.substr(s.size() - n)) return n;
  return 0;
}

bool is_prefix_of(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.substr(0, s.size()) == s;
}

}  // namespace

ToolFormat tool_format(std::string_view src) {
  // The order llama.cpp's chat handlers test them in.
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolFormat::Hermes;
  if (src.find("<|start_header_id|>ipython<|end_header_id|>") != std::string_view::npos ||
      src.find(kPythonTag) != std::string_view::npos)
    return ToolFormat::Llama3;
  if (src.find(kMistralMarker) != std::string_view::npos) return ToolFormat::Mistral;
  return ToolFormat::Json;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Llama3: return "llama3";
    case ToolFormat::Mistral: return "mistral";
    case ToolFormat::Json: return "json";
  }
  return "?";
}

bool template_shows_tools(const ChatTemplate& tmpl) {
  constexpr std::string_view kProbe = "tally_probe_tool_4f1c";
  const nlohmann::ordered_json tools = nlohmann::ordered_json::array(
      {{{"type", "function"},
        {"function",
         {{"name", kProbe},
          {"description", "probe"},
          {"parameters", {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}}}}}}});
  const std::vector<ChatMessage> msgs = {{"user", "hello"}};
  try {
    std::string text;
    for (const PromptSegment& s : tmpl.render_segments(msgs, true, tools)) text += s.text;
    return text.find(kProbe) != std::string::npos;
  } catch (const Error&) {
    return false;  // a template that fails on one user message and one tool cannot take tools
  }
}

std::string new_call_id() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  std::lock_guard<std::mutex> lock(m);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

grammar::Constraint call_constraint(ToolFormat format, const nlohmann::ordered_json& tools,
                                    const grammar::Vocabulary& vocab, bool parallel) {
  using ojson = nlohmann::ordered_json;
  const char* args_key = format == ToolFormat::Llama3 ? "parameters" : "arguments";
  ojson calls = ojson::array();
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    ojson params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : ojson{{"type", "object"}};
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", fn["name"]}}}, {args_key, std::move(params)}}},
                     {"required", {"name", args_key}},
                     {"additionalProperties", false}});
  }
  ojson call = calls.size() == 1 ? calls[0] : ojson{{"anyOf", calls}};
  std::vector<grammar::Part> parts;
  switch (format) {
    case ToolFormat::Hermes:  // several: one tagged call after another
      parts = {grammar::Part::literal("<tool_call>\n"), grammar::Part::json_schema(call),
               grammar::Part::literal("\n</tool_call>")};
      return parallel ? grammar::Constraint::one_or_more(vocab, parts, "\n") : grammar::Constraint::sequence(vocab, parts);
    case ToolFormat::Mistral:  // [TOOL_CALLS] is a control token: the grammar writes the bare list
      if (parallel)
        return grammar::Constraint::json_schema(vocab, {{"type", "array"}, {"items", std::move(call)}, {"minItems", 1}});
      parts = {grammar::Part::literal("["), grammar::Part::json_schema(call), grammar::Part::literal("]")};
      return grammar::Constraint::sequence(vocab, parts);
    case ToolFormat::Llama3:  // several: separated by ';'
      parts = {grammar::Part::json_schema(call)};
      return parallel ? grammar::Constraint::one_or_more(vocab, parts, "; ") : grammar::Constraint::sequence(vocab, parts);
    case ToolFormat::Json:  // the whole reply is one object: one call
      break;
  }
  parts = {grammar::Part::json_schema(call)};
  return grammar::Constraint::sequence(vocab, parts);
}

ToolCallParser::ToolCallParser(ToolFormat format, std::vector<std::string> names, bool parallel)
    : format_(format), names_(std::move(names)), parallel_(parallel) {}

size_t ToolCallParser::hold_from(std::string_view reply, bool complete) const {
  const std::string_view rest = reply.substr(skip_space(reply, 0));
  if (format_ == ToolFormat::Hermes) {
    // Small models often leave the tags out: a reply that is a bare JSON object counts too.
    if (!rest.empty() && rest[0] == '{') return 0;
    if (rest.empty() && !complete) return 0;
    const size_t at = reply.find(kHermesOpen);
    if (at != std::string_view::npos) return at;
    return complete ? reply.size() : reply.size() - partial_tail(reply, kHermesOpen);
  }
  // The other forms are the whole reply: held from its start when it begins as a call would.
  if (rest.empty()) return complete ? reply.size() : 0;
  const char open = format_ == ToolFormat::Mistral ? '[' : '{';
  const std::string_view marker = format_ == ToolFormat::Mistral ? kMistralMarker : kPythonTag;
  if (rest[0] == open || rest.substr(0, marker.size()) == marker) return 0;
  if (!complete && format_ != ToolFormat::Json && is_prefix_of(rest, marker)) return 0;
  return reply.size();
}

std::vector<PartialCall> ToolCallParser::partial_calls(std::string_view s) const {
  const std::string_view args_key = format_ == ToolFormat::Llama3 ? "parameters" : "arguments";
  std::vector<PartialCall> out;
  std::vector<char> open;     // the containers open at this point, '{' or '['
  size_t call_level = 0;      // open.size() inside the current call object; 0: outside any
  bool expect_key = false;    // in the call object: the next string is a key
  std::string key;            // in the call object: the key whose value comes next
  size_t args_from = std::string_view::npos;
  bool in_string = false;
  size_t string_from = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (call_level != 0 && open.size() == call_level) {
          const std::string_view text = s.substr(string_from - 1, i - string_from + 2);  // with its quotes
          const json v = parse_json_guarded(text);
          if (expect_key) {
            key = v.is_string() ? v.get<std::string>() : std::string();
            expect_key = false;
          } else if (key == "name" && v.is_string()) {
            out.back().name = v.get<std::string>();
          }
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_from = i + 1;
    } else if (c == '{' || c == '[') {
      if (call_level != 0 && open.size() == call_level && key == args_key && args_from == std::string_view::npos)
        args_from = i;
      open.push_back(c);
      if (open.size() > kMaxDepth) break;
      const bool top = open.size() == 1 || (open.size() == 2 && open[0] == '[');
      if (c == '{' && call_level == 0 && top) {
        call_level = open.size();
        expect_key = true;
        key.clear();
        args_from = std::string_view::npos;
        out.emplace_back();
      }
    } else if (c == '}' || c == ']') {
      if (open.empty()) continue;
      open.pop_back();
      if (call_level != 0 && open.size() == call_level && args_from != std::string_view::npos && !out.back().complete) {
        out.back().arguments = std::string(s.substr(args_from, i + 1 - args_from));
        out.back().complete = true;
      }
      if (open.size() < call_level) call_level = 0;
    } else if (c == ',' && call_level != 0 && open.size() == call_level) {
      expect_key = true;
    }
  }
  if (call_level != 0 && args_from != std::string_view::npos && !out.back().complete)
    out.back().arguments = std::string(s.substr(args_from));
  return out;
}

bool ToolCallParser::take_call(const json& obj, const char* args_key, std::vector<ToolCall>& calls,
                               std::string& why) const {
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) {
    why = "a tool call without a \"name\" string";
    return false;
  }
  const std::string name = obj["name"].get<std::string>();
  if (std::find(names_.begin(), names_.end(), name) == names_.end()) {
    why = fmt::format("a call to \"{}\", which is not one of the request's tools", name.substr(0, 64));
    return false;
  }
  // The arguments' key as the template spells it; the other spelling is taken too.
  const char* other = std::string_view(args_key) == "arguments" ? "parameters" : "arguments";
  json args = obj.contains(args_key) ? obj[args_key] : obj.contains(other) ? obj[other] : json::object();
  if (args.is_string()) args = parse_json_guarded(args.get<std::string>());  // arguments encoded twice
  if (!args.is_object()) {
    why = fmt::format("the arguments of the call to \"{}\" are not a JSON object", name.substr(0, 64));
    return false;
  }
  if (!parallel_ && !calls.empty()) {
    why = "more than one call while parallel_tool_calls is false";
    return false;
  }
  calls.push_back({new_call_id(), name, args.dump(-1, ' ', false, json::error_handler_t::replace)});
  return true;
}

ParsedReply ToolCallParser::parse_hermes(std::string_view held) const {
  ParsedReply r;
  size_t i = 0;
  while (i < held.size()) {
    const size_t open = held.find(kHermesOpen, i);
    const std::string_view gap = held.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    if (!blank(gap)) r.content += gap;
    if (open == std::string_view::npos) break;
    // The call: one JSON object, then the closing tag (which a reply cut at its end may lack).
    const size_t start = skip_space(held, open + kHermesOpen.size());
    const size_t end = start < held.size() && held[start] == '{' ? json_extent(held, start) : std::string_view::npos;
    size_t next = std::string_view::npos;
    std::string why = "a <tool_call> that does not hold one JSON object";
    if (end != std::string_view::npos) {
      const size_t after = skip_space(held, end);
      if (held.substr(after, kHermesClose.size()) == kHermesClose)
        next = after + kHermesClose.size();
      else if (after == held.size())
        next = after;
      else
        why = "a <tool_call> not closed by </tool_call>";
    }
    if (next != std::string_view::npos) {
      const json obj = parse_json_guarded(held.substr(start, end - start));
      if (obj.is_discarded()) {
        why = "a <tool_call> whose JSON does not parse";
      } else if (take_call(obj, "arguments", r.calls, why)) {
        i = next;
        continue;
      }
    }
    // Not a call: the text to the next opening (or the end) stays content.
    const size_t resume = held.find(kHermesOpen, open + kHermesOpen.size());
    const size_t stop = next != std::string_view::npos ? std::min(next, resume) : resume;
    r.content += held.substr(open, stop == std::string_view::npos ? std::string_view::npos : stop - open);
    if (r.warning.empty()) r.warning = why;
    i = stop == std::string_view::npos ? held.size() : stop;
  }
  return r;
}

ParsedReply ToolCallParser::parse_whole(std::string_view held) const {
  ParsedReply r;
  size_t i = skip_space(held, 0);
  bool marked = false;
  const std::string_view marker = format_ == ToolFormat::Mistral ? kMistralMarker : kPythonTag;
  if ((format_ == ToolFormat::Llama3 || format_ == ToolFormat::Mistral) && held.substr(i, marker.size()) == marker) {
    marked = true;
    i = skip_space(held, i + marker.size());
  }
  const char* args_key = format_ == ToolFormat::Llama3 ? "parameters" : "arguments";
  std::string why;
  std::vector<json> objects;
  // A reply that begins as a call object does ({"name" first, as every form writes it).
  const size_t first = skip_space(held, i + 1);
  bool looks_like_call = marked || (i < held.size() && held[i] == '{' && held.compare(first, 6, "\"name\"") == 0);
  bool ok = true;
  // Mistral: one list of calls; the others: objects, one after another (';' between for Llama).
  while (ok && i < held.size()) {
    const size_t end = json_extent(held, i);
    const json v = end == std::string_view::npos ? json(json::value_t::discarded) : parse_json_guarded(held.substr(i, end - i));
    if (v.is_discarded()) {
      ok = false;
      why = "a tool call whose JSON does not parse";
      break;
    }
    if (format_ == ToolFormat::Mistral) {
      if (!v.is_array()) ok = false;
      for (const json& e : v) objects.push_back(e);
    } else {
      objects.push_back(v);
    }
    i = skip_space(held, end);
    // Objects follow one another, ';' or white space between (Llama 3's several calls).
    if (format_ == ToolFormat::Mistral || i >= held.size()) break;
    if (held[i] == ';') i = skip_space(held, i + 1);
    if (i < held.size() && held[i] != '{') break;
  }
  for (const json& o : objects)
    if (o.is_object() && o.contains("name")) looks_like_call = true;
  if (ok && i < held.size()) {
    ok = false;
    why = "text after the tool calls";
  }
  if (ok && objects.empty()) ok = false;
  std::vector<ToolCall> calls;
  for (size_t k = 0; ok && k < objects.size(); ++k) ok = take_call(objects[k], args_key, calls, why);
  if (ok) {
    r.calls = std::move(calls);
    return r;
  }
  // Not calls: the reply is text; a warning only where it meant to be a call.
  r.content = std::string(held);
  if (looks_like_call) r.warning = why.empty() ? "a tool call that does not have the expected shape" : why;
  return r;
}

ParsedReply ToolCallParser::parse(std::string_view reply) const {
  const size_t h = hold_from(reply, true);
  const std::string_view held = reply.substr(h);
  const bool bare = format_ == ToolFormat::Hermes && skip_space(held, 0) < held.size() && held[skip_space(held, 0)] == '{';
  ParsedReply r = format_ == ToolFormat::Hermes && !bare ? parse_hermes(held) : parse_whole(held);
  r.content.insert(0, reply.substr(0, h));
  return r;
}

}  // namespace tally::server
