// Tool calls in model output (server/tool_calls.h): the form read from real
// chat templates, assistant turns as the templates themselves write them
// (rendered by Python jinja2: tests/fixtures/tool_calls/renders.json, made by
// scripts/fixtures/make_tool_call_fixtures.py) parsed back into the calls that
// went in, replies of qwen2.5-coder:0.5b, streaming holds, and malformed calls
// kept as text with a warning.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "tokenizer/chat_template.h"
#include "test_util.h"

namespace tally::server {
namespace {

using nlohmann::json;

using test::read_fixture;

ChatTemplate from_fixture(const std::string& name) {
  return ChatTemplate::from_source(read_fixture(name), name, "<s>", "</s>");
}

const std::vector<std::string> kNames = {"get_weather", "add"};

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \n\t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \n\t\r") - a + 1);
}

TEST(ToolCalls, FormatAndSupportReadFromRealTemplates) {
  struct Case {
    const char* file;
    ToolFormat format;
    bool shows_tools;
  };
  for (const Case& c : {Case{"chat_templates/qwen2.5-coder-0.5b-instruct.jinja", ToolFormat::Hermes, true},
                        Case{"chat_templates/qwen2.5-coder-1.5b-instruct.jinja", ToolFormat::Hermes, true},
                        Case{"chat_templates/qwen3.jinja", ToolFormat::Hermes, true},
                        Case{"chat_templates/llama-3.2-instruct.jinja", ToolFormat::Llama3, true},
                        Case{"tool_calls/mistral-nemo-instruct-2407.jinja", ToolFormat::Mistral, true},
                        Case{"chat_templates/smollm2-135m-instruct.jinja", ToolFormat::Json, false},
                        Case{"chat_templates/gemma-3-it.jinja", ToolFormat::Json, false},
                        Case{"chat_templates/mistral-7b-instruct-v0.2.jinja", ToolFormat::Json, false}}) {
    const ChatTemplate t = from_fixture(c.file);
    EXPECT_EQ(tool_format(t.source()), c.format) << c.file;
    EXPECT_EQ(template_shows_tools(t), c.shows_tools) << c.file;
  }
}

// What each template writes for an assistant turn with calls parses back into those calls.
TEST(ToolCalls, TemplateRendersParseBackIntoTheirCalls) {
  const json cases = json::parse(read_fixture("tool_calls/renders.json"));
  ASSERT_GE(cases.size(), 40u);
  std::map<std::string, int> per_format;
  for (const json& c : cases) {
    const std::string file = c["template"].get<std::string>().substr(std::string("tests/fixtures/").size());
    const ToolFormat f = tool_format(read_fixture(file));
    const std::string reply = c["reply"];
    SCOPED_TRACE(file + ": " + reply);
    const ParsedReply p = ToolCallParser(f, kNames, true).parse(reply);
    EXPECT_EQ(p.warning, "");
    ASSERT_EQ(p.calls.size(), c["calls"].size());
    for (size_t k = 0; k < p.calls.size(); ++k) {
      EXPECT_EQ(p.calls[k].name, c["calls"][k]["name"]);
      EXPECT_EQ(json::parse(p.calls[k].arguments), c["calls"][k]["arguments"]);
      EXPECT_EQ(p.calls[k].id.substr(0, 5), "call_");
      EXPECT_EQ(p.calls[k].id.size(), 29u);
    }
    // The text is what remains (Qwen3's template also writes an empty <think></think> before it).
    const std::string text = trimmed(p.content), want = c["content"].is_null() ? "" : c["content"].get<std::string>();
    EXPECT_TRUE(text.size() >= want.size() && text.compare(text.size() - want.size(), want.size(), want) == 0) << text;
    EXPECT_EQ(p.content.find('{'), std::string::npos) << p.content;
    if (file.find("qwen3") == std::string::npos) {
      EXPECT_EQ(text, want);
    }
    ++per_format[tool_format_name(f)];
  }
  EXPECT_GE(per_format["hermes"], 20);
  EXPECT_GE(per_format["llama3"], 8);
  EXPECT_GE(per_format["mistral"], 10);
}

// Streaming: the content sent while a reply grows is never taken back, and
// never includes any of a call.
TEST(ToolCalls, StreamingHoldsNeverSendACall) {
  const json cases = json::parse(read_fixture("tool_calls/renders.json"));
  for (const json& c : cases) {
    const std::string file = c["template"].get<std::string>().substr(std::string("tests/fixtures/").size());
    const ToolCallParser parser(tool_format(read_fixture(file)), kNames, true);
    const std::string reply = c["reply"];
    const std::string content = parser.parse(reply).content;
    size_t sent = 0;
    for (size_t n = 0; n <= reply.size(); ++n) {
      const size_t h = parser.hold_from(std::string_view(reply).substr(0, n), false);
      ASSERT_LE(h, n);
      sent = std::max(sent, h);
    }
    SCOPED_TRACE(file + ": " + reply);
    EXPECT_LE(sent, parser.hold_from(reply, true));
    EXPECT_EQ(content.substr(0, sent), reply.substr(0, sent));
    EXPECT_EQ(reply.substr(0, sent).find('{'), std::string::npos);
  }
}

// Replies of qwen2.5-coder:0.5b (greedy, tally serve, the get_weather tool of
// tests/server/test_tools.py), as the server returned them with tool_choice
// "none": the model leaves out the <tool_call> tags its template shows.
TEST(ToolCalls, QwenCoderReplies) {
  const ToolCallParser p(ToolFormat::Hermes, {"get_weather"}, true);
  const std::string reply = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  const ParsedReply one = p.parse(reply);
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].name, "get_weather");
  EXPECT_EQ(one.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(one.content, "");
  EXPECT_EQ(one.warning, "");
  for (size_t n = 0; n <= reply.size(); ++n) EXPECT_EQ(p.hold_from(std::string_view(reply).substr(0, n), false), 0u);
  // Two bare calls, one per line.
  EXPECT_EQ(p.parse(reply + "\n" + reply).calls.size(), 2u);
  // A bare JSON answer that is not a call is text, without a warning.
  const ParsedReply answer = p.parse("{\"temperature\": 18}");
  EXPECT_TRUE(answer.calls.empty());
  EXPECT_EQ(answer.content, "{\"temperature\": 18}");
  EXPECT_EQ(answer.warning, "");
}

TEST(ToolCalls, HermesMalformedCallsStayText) {
  const ToolCallParser p(ToolFormat::Hermes, kNames, true);
  // JSON that does not parse.
  std::string text = "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,}}\n</tool_call>";
  ParsedReply r = p.parse(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
  EXPECT_NE(r.warning.find("does not parse"), std::string::npos) << r.warning;
  // A tool the request did not declare.
  text = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
  r = p.parse(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
  EXPECT_NE(r.warning.find("\"rm_rf\""), std::string::npos) << r.warning;
  // Cut off inside the JSON (max_tokens).
  text = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ";
  r = p.parse(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
  EXPECT_FALSE(r.warning.empty());
  // Arguments that are not an object.
  r = p.parse("<tool_call>{\"name\": \"add\", \"arguments\": [1, 2]}</tool_call>");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_NE(r.warning.find("not a JSON object"), std::string::npos) << r.warning;
  // A good call after a bad one is still a call; the bad one is text.
  r = p.parse("<tool_call>{\"nam\": 1}</tool_call><tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "add");
  EXPECT_EQ(r.content, "<tool_call>{\"nam\": 1}</tool_call>");
  EXPECT_FALSE(r.warning.empty());
  // Nesting deeper than the limit.
  text = "<tool_call>{\"name\": \"add\", \"arguments\": " + std::string(200, '[') + std::string(200, ']') + "}</tool_call>";
  r = p.parse(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(ToolCalls, HermesVariants) {
  const ToolCallParser p(ToolFormat::Hermes, kNames, true);
  // No closing tag at the end of the reply (the model stopped there).
  ParsedReply r = p.parse("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a":1})");
  // Arguments encoded as a JSON string, and "parameters" for "arguments".
  r = p.parse("<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 2}\"}</tool_call>"
              "<tool_call>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"x}\"}}</tool_call> done");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a":2})");
  EXPECT_EQ(r.calls[1].arguments, R"({"city":"x}"})");
  EXPECT_EQ(r.content, " done");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // Without parallel calls, a second call is text.
  const ToolCallParser one(ToolFormat::Hermes, kNames, false);
  r = one.parse("<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>");
  EXPECT_NE(r.warning.find("parallel_tool_calls"), std::string::npos);
  // A reply without the tag is all content; a partial tag is held while streaming, not at the end.
  EXPECT_EQ(p.parse("no calls <tool").content, "no calls <tool");
  EXPECT_EQ(p.hold_from("no calls <tool", false), 9u);
  EXPECT_EQ(p.hold_from("no calls <tool", true), 14u);
  EXPECT_EQ(p.hold_from("a < b", false), 5u);
}

TEST(ToolCalls, Llama3AndMistralForms) {
  const ToolCallParser llama(ToolFormat::Llama3, kNames, true);
  // <|python_tag|> (when rendered), several calls separated by ';'.
  ParsedReply r = llama.parse("<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(r.content, "");
  // JSON that is not a call is an answer: content, no warning.
  r = llama.parse("{\"answer\": 42}");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"answer\": 42}");
  EXPECT_EQ(r.warning, "");
  // Text first: not a call.
  r = llama.parse("Here: {\"name\": \"add\", \"parameters\": {}}");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(llama.hold_from("Here: {", false), 7u);
  // A call to an undeclared tool: text with a warning.
  r = llama.parse("{\"name\": \"shell\", \"parameters\": {}}");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_FALSE(r.warning.empty());

  const ToolCallParser mistral(ToolFormat::Mistral, kNames, true);
  // [TOOL_CALLS] is a control token: its text is not in the reply.
  r = mistral.parse("[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, \"id\": \"abcdefghi\"}]");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a":1,"b":2})");
  r = mistral.parse("[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"nope\", \"arguments\": {}}]");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_FALSE(r.warning.empty());
  r = mistral.parse("[1, 2, 3]");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[1, 2, 3]");
  EXPECT_EQ(r.warning, "");
}

// A reply a grammar makes calls, streamed: at every prefix each call's name
// is there only once whole, and its arguments are a prefix of what the whole
// reply holds (as written), complete once the value closes.
TEST(ToolCalls, PartialCallsGrowWithTheReply) {
  struct Case {
    ToolFormat format;
    std::string reply;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments as written
  };
  const std::vector<Case> cases = {
      {ToolFormat::Hermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris {\\\"x\\\"}\", \"days\": [1, 2]}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
       {{"get_weather", "{\"city\": \"Paris {\\\"x\\\"}\", \"days\": [1, 2]}"}, {"ping", "{}"}}},
      {ToolFormat::Mistral, "[{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"arguments\": {\"b\": {}}, \"name\": \"b\\u00e9\"}]",
       {{"add", "{\"a\": 1}"}, {"b\u00e9", "{\"b\": {}}"}}},
      {ToolFormat::Llama3, "{\"name\": \"add\", \"parameters\": {\"arguments\": {\"name\": 2}}}; {\"name\": \"x\", \"parameters\": {}}",
       {{"add", "{\"arguments\": {\"name\": 2}}"}, {"x", "{}"}}},
  };
  for (const Case& c : cases) {
    const ToolCallParser parser(c.format, {}, true);
    for (size_t n = 0; n <= c.reply.size(); ++n) {
      const std::vector<PartialCall> got = parser.partial_calls(std::string_view(c.reply).substr(0, n));
      ASSERT_LE(got.size(), c.calls.size()) << c.reply.substr(0, n);
      for (size_t k = 0; k < got.size(); ++k) {
        const auto& [name, args] = c.calls[k];
        EXPECT_TRUE(got[k].name.empty() || got[k].name == name) << c.reply.substr(0, n);
        EXPECT_EQ(args.substr(0, got[k].arguments.size()), got[k].arguments) << c.reply.substr(0, n);
        EXPECT_EQ(got[k].complete, got[k].arguments == args) << c.reply.substr(0, n);
      }
    }
    const std::vector<PartialCall> whole = parser.partial_calls(c.reply);
    ASSERT_EQ(whole.size(), c.calls.size()) << c.reply;
    for (size_t k = 0; k < whole.size(); ++k) {
      EXPECT_EQ(whole[k].name, c.calls[k].first);
      EXPECT_EQ(whole[k].arguments, c.calls[k].second);
      EXPECT_TRUE(whole[k].complete);
    }
  }
}

}  // namespace
}  // namespace tally::server

namespace tally::server {
namespace {

// A vocabulary of the 256 single bytes (and an end token): grammars over it accept any text they allow.
grammar::Vocabulary byte_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.emplace_back();  // 256: the end token
  return grammar::Vocabulary(std::move(bytes), 257, {256});
}

// A required call: the grammar takes exactly one call in the template's form, to a
// declared tool, with arguments valid against its parameters; and what it takes parses.
TEST(ToolCalls, RequiredCallGrammar) {
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "ping"}}])");
  const grammar::Vocabulary v = byte_vocab();
  const grammar::Constraint hermes = call_constraint(ToolFormat::Hermes, tools, v, false);
  const std::string good = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
  EXPECT_TRUE(hermes.matches(good));
  EXPECT_TRUE(hermes.matches("<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(hermes.matches("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  EXPECT_FALSE(hermes.matches("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}\n</tool_call>"));
  EXPECT_FALSE(hermes.matches("<tool_call>\n{\"name\": \"sub\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
  EXPECT_FALSE(hermes.matches("Sure! " + good));
  const ParsedReply p = ToolCallParser(ToolFormat::Hermes, {"add", "ping"}, true).parse(good);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a":1,"b":2})");

  const grammar::Constraint llama = call_constraint(ToolFormat::Llama3, tools, v, false);
  EXPECT_TRUE(llama.matches("{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"));
  EXPECT_FALSE(llama.matches("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
  const grammar::Constraint mistral = call_constraint(ToolFormat::Mistral, tools, v, false);
  EXPECT_TRUE(mistral.matches("[{\"name\": \"ping\", \"arguments\": {}}]"));
  // Without parallel calls a reply holds one call; with them, one or more (none is not a reply).
  const std::string ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  EXPECT_FALSE(hermes.matches(good + "\n" + ping));
  const grammar::Constraint hermes_n = call_constraint(ToolFormat::Hermes, tools, v, true);
  EXPECT_TRUE(hermes_n.matches(good));
  EXPECT_TRUE(hermes_n.matches(good + "\n" + ping + "\n" + good));
  EXPECT_FALSE(hermes_n.matches(good + "\n"));
  EXPECT_FALSE(hermes_n.matches(good + "\n" + ping.substr(0, 20)));
  EXPECT_FALSE(hermes_n.matches(""));
  const ParsedReply two = ToolCallParser(ToolFormat::Hermes, {"add", "ping"}, true).parse(good + "\n" + ping);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "ping");
  const std::string add_l = "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}";
  const std::string ping_l = "{\"name\": \"ping\", \"parameters\": {}}";
  EXPECT_FALSE(llama.matches(add_l + "; " + ping_l));
  const grammar::Constraint llama_n = call_constraint(ToolFormat::Llama3, tools, v, true);
  EXPECT_TRUE(llama_n.matches(add_l + "; " + ping_l));
  EXPECT_EQ(ToolCallParser(ToolFormat::Llama3, {"add", "ping"}, true).parse(add_l + "; " + ping_l).calls.size(), 2u);
  const std::string ping_m = "{\"name\": \"ping\", \"arguments\": {}}";
  EXPECT_FALSE(mistral.matches("[" + ping_m + ", " + ping_m + "]"));
  const grammar::Constraint mistral_n = call_constraint(ToolFormat::Mistral, tools, v, true);
  EXPECT_TRUE(mistral_n.matches("[" + ping_m + ", " + ping_m + "]"));
  EXPECT_FALSE(mistral_n.matches("[]"));
  // The whole-reply JSON form holds one call, parallel or not.
  EXPECT_FALSE(call_constraint(ToolFormat::Json, tools, v, true).matches(ping_m + ping_m));
  // Parameters the grammar cannot enforce are refused, naming the keyword.
  const auto odd = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
           "patternProperties": {"^x": {"type": "string"}}}}}])");
  try {
    call_constraint(ToolFormat::Hermes, odd, v, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tally::server
