#pragma once
// Tool calls in a chat model's output: which form the model writes them in
// (read from its chat template), and the reply's text split into content and
// OpenAI tool calls.
//
//   Hermes   <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, anywhere,
//            several in a row (Qwen2.5, Qwen3, Hermes 2/3); or, as small
//            Qwen models answer, the bare objects as the whole reply
//   Llama3   {"name": N, "parameters": {...}} as the whole reply, after an
//            optional <|python_tag|>; several separated by ';' (Llama 3.1-3.3)
//   Mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] as the whole
//            reply; [TOOL_CALLS] is a control token, so the bare list counts too
//   Json     a template that shows tools but none of the markers above: the
//            whole reply as one {"name", "arguments"|"parameters"} object
//
// A reply is content up to where a call may start (its *opening*: the
// Hermes tag anywhere, or for the other forms a reply that begins with '{',
// '[' or the marker), and a held part from there on, which is parsed once the
// reply is complete. A call that does not parse or names a tool the request
// did not declare stays text, and the split says why (warning): the model's
// output is never lost and never a server error.
// Invariant: the content begins with the text before the held part, and
// text is only ever left out of it as a call (or white space between calls).
// Immutable after construction; thread-safe.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace tally {
class ChatTemplate;
}

namespace tally::server {

enum class ToolFormat { Hermes, Llama3, Mistral, Json };

// The form the template's own source shows its calls in.
ToolFormat tool_format(std::string_view template_source);
const char* tool_format_name(ToolFormat f);
// Whether the template writes the tools it is given into the prompt: it is
// rendered with one probe tool and must show the tool's name.
bool template_shows_tools(const ChatTemplate& tmpl);

struct ToolCall {
  std::string id;         // "call_" + 24 random letters and digits
  std::string name;
  std::string arguments;  // a JSON object, as compact text
};

struct ParsedReply {
  std::string content;  // the text that is not a call
  std::vector<ToolCall> calls;
  std::string warning;  // why some text that looked like a call is content ("" when none)
};

// A call as far as a reply has written it, for streaming the calls of a
// reply that a grammar makes calls (call_constraint): its name once the
// name's string is complete (else ""), and its arguments' text as the model
// wrote it so far (the whole value once `complete`).
struct PartialCall {
  std::string name;
  std::string arguments;
  bool complete = false;
};

class ToolCallParser {
 public:
  // names: the declared tools' names; parallel: more than one call may be taken.
  ToolCallParser(ToolFormat format, std::vector<std::string> names, bool parallel);

  // Where the held part of `reply` starts: reply.size() when nothing in it
  // may open a call. For streaming, text up to this point can be sent:
  // `complete` false means more text may follow, and a tail that could grow
  // into the opening is held too.
  size_t hold_from(std::string_view reply, bool complete) const;
  // The reply split, once it is complete.
  ParsedReply parse(std::string_view reply) const;
  // The calls begun in `reply` so far, in order: objects at the top level
  // of the text (or of its top-level list, Mistral's form) with a "name"
  // and, as an object or list, the arguments ("parameters" for Llama 3).
  // Text outside them is skipped; it does not check that the text is JSON.
  std::vector<PartialCall> partial_calls(std::string_view reply) const;

 private:
  bool take_call(const nlohmann::json& obj, const char* args_key, std::vector<ToolCall>& calls,
                 std::string& why) const;
  ParsedReply parse_hermes(std::string_view held) const;
  ParsedReply parse_whole(std::string_view held) const;

  ToolFormat format_;
  std::vector<std::string> names_;
  bool parallel_;
};

// A fresh call id.
std::string new_call_id();

// The grammar a reply must follow when it has to be a call (tool_choice
// "required" or a named function): a call, in the template's form, to one
// of `tools` (OpenAI tool definitions), its arguments valid against that
// tool's parameters; with `parallel`, one or more such calls where the form
// can hold several. Hermes: "<tool_call>\n" {"name", "arguments"}
// "\n</tool_call>" (several: one per line); Llama 3: {"name", "parameters"}
// (several: separated by "; "); Mistral: [{"name", "arguments"}, ...]; Json:
// {"name", "arguments"}, always one. Throws tally::Error naming the schema
// keyword the grammar cannot enforce.
grammar::Constraint call_constraint(ToolFormat format, const nlohmann::ordered_json& tools,
                                    const grammar::Vocabulary& vocab, bool parallel);

}  // namespace tally::server
