// The Jinja engine against Python jinja2 3.1.6 in Hugging Face's chat
// template environment (scripts/fixtures/make_template_fixtures.py): every
// language feature on its own (tests/fixtures/jinja/semantics.json), and real
// chat templates with real conversations, byte for byte
// (tests/fixtures/chat_templates/). Then what the references cannot show:
// provenance of each output byte, limits, and errors at load naming line and
// column.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "jinja/template.h"

namespace tally {
namespace {

using nlohmann::ordered_json;
using jinja::Segment;
using jinja::Template;
using jinja::Variable;

ordered_json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return ordered_json::parse(in);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string joined(const std::vector<Segment>& segs) {
  std::string s;
  for (const auto& g : segs) s += g.text;
  return s;
}

// Renders; "" plus *error set when it fails (raised: the template's raise_exception).
std::string try_render(const std::string& source, const std::vector<Variable>& vars, std::time_t now,
                       std::string* error, bool* raised) {
  error->clear();
  *raised = false;
  try {
    const Template t = Template::parse(source, "test.jinja");
    jinja::RenderOptions o;
    o.now = now;
    return joined(t.render(vars, o));
  } catch (const jinja::TemplateError& e) {
    *raised = true;
    *error = e.what();
  } catch (const Error& e) {
    *error = e.what();
  }
  if (error->empty()) *error = "(empty message)";
  return "";
}

TEST(Jinja, SemanticsMatchJinja2) {
  const ordered_json fx = load_json(TALLY_FIXTURES_DIR "/jinja/semantics.json");
  std::vector<Variable> vars;
  for (const auto& [k, v] : fx["context"].items()) vars.push_back({k, v, false});
  const auto now = fx["now_epoch"].get<std::time_t>();
  ASSERT_GE(fx["cases"].size(), 100u);
  for (const auto& c : fx["cases"]) {
    const std::string name = c["name"].get<std::string>();
    std::string error;
    bool raised = false;
    const std::string out = try_render(c["template"].get<std::string>(), vars, now, &error, &raised);
    if (c.contains("output")) {
      EXPECT_EQ(error, "") << name;
      EXPECT_EQ(out, c["output"].get<std::string>()) << name;
    } else {
      EXPECT_NE(error, "") << name << ": jinja2 fails with " << c["error"];
      EXPECT_EQ(raised, c["raised"].get<bool>()) << name << ": " << error;
      if (raised) {
        EXPECT_EQ(error, c["error"].get<std::string>()) << name;
      }
    }
  }
}

TEST(Jinja, ChatTemplatesMatchJinja2) {
  const ordered_json fx = load_json(TALLY_FIXTURES_DIR "/chat_templates/expected.json");
  const auto now = fx["now_epoch"].get<std::time_t>();
  ASSERT_GE(fx["cases"].size(), 300u);
  size_t rendered = 0;
  for (const auto& c : fx["cases"]) {
    const std::string tname = c["template"].get<std::string>();
    const std::string source = read_file(TALLY_FIXTURES_DIR "/chat_templates/" + tname);
    const ordered_json& conv = fx["conversations"][c["conversation"].get<std::string>()];
    const std::vector<Variable> vars = {
        {"messages", conv["messages"], true},
        {"tools", conv.contains("tools") ? conv["tools"] : ordered_json(nullptr), true},
        {"documents", nullptr, false},
        {"add_generation_prompt", c["add_generation_prompt"], false},
        {"bos_token", c["bos_token"], false},
        {"eos_token", c["eos_token"], false},
    };
    const std::string what = tname + " / " + c["conversation"].get<std::string>() +
                             (c["add_generation_prompt"].get<bool>() ? " / generation prompt" : "");
    std::string error;
    bool raised = false;
    const std::string out = try_render(source, vars, now, &error, &raised);
    if (c.contains("output")) {
      EXPECT_EQ(error, "") << what;
      EXPECT_EQ(out, c["output"].get<std::string>()) << what;
      ++rendered;
    } else {
      EXPECT_NE(error, "") << what << ": jinja2 fails with " << c["error"];
      EXPECT_EQ(raised, c["raised"].get<bool>()) << what << ": " << error;
      if (raised) {
        EXPECT_EQ(error, c["error"].get<std::string>()) << what;
      }
    }
  }
  EXPECT_GE(rendered, 250u);
}

std::vector<Variable> chat_vars(const std::string& content) {
  return {{"messages", ordered_json::array({{{"role", "user"}, {"content", content}}}), true},
          {"add_generation_prompt", true, false},
          {"bos_token", "<s>", false}};
}

// Which bytes came from the conversation: exactly the message text, wherever
// string operations moved it, while the template's markup stays the template's.
TEST(Jinja, ProvenanceFollowsTheText) {
  const Template t = Template::parse(
      "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>' }}"
      "{{ m.content.split('|')[1] }}{{ m.content | upper | replace('B', '<|x|>') }}{{ m | tojson }}{% endfor %}",
      "t");
  const auto segs = t.render(chat_vars(" a|b "));
  std::string from_input, from_template;
  for (const auto& s : segs) (s.from_input ? from_input : from_template) += s.text + "^";
  // Input: the role, the trimmed content, the split piece, the upper-cased text
  // around the replacement, and the JSON's strings (keys and values).
  EXPECT_EQ(from_input, "user^a|b^b  A|^ ^role^user^content^ a|b ^");
  EXPECT_EQ(from_template, "<s><|im_start|>^\n^<|im_end|>^<|x|>^{\"^\": \"^\", \"^\": \"^\"}^");
}

TEST(Jinja, ProvenanceOfDefaultsAndLiterals) {
  // A literal the template chooses by a test on the input is still template text.
  const Template t = Template::parse("{% if messages[0].content == 'x' %}{{ 'yes' }}{% endif %}{{ messages[0].content }}", "t");
  const auto segs = t.render(chat_vars("x"));
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].text, "yes");
  EXPECT_FALSE(segs[0].from_input);
  EXPECT_EQ(segs[1].text, "x");
  EXPECT_TRUE(segs[1].from_input);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    const char* source;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"a\n{% for x in xs %}\n{% endif %}", "line 3, column 4", "unexpected 'endif'"},
      {"{{ x | nosuch }}", "line 1, column 8", "no filter named 'nosuch'"},
      {"ok\n  {{ x is nosuch }}", "line 2, column 11", "no test named 'nosuch'"},
      {"{% if x %}\nunclosed", "line 2", "looking for 'elif' or 'else' or 'endif'"},
      {"{{ 'abc }}", "line 1, column 4", "unterminated string"},
      {"{# never closed", "line 1, column 1", "missing end of comment tag"},
      {"x {{ a ]] }}", "line 1, column 8", "unexpected ']'"},
      {"{% include 'x' %}", "line 1, column 4", "'include' tag is not supported"},
      {"{% frob %}", "line 1, column 4", "unknown tag 'frob'"},
      {"{{ x[1:2, 3] }}", "line 1, column 5", "a slice inside a tuple of indexes"},
      {"{{ 99999999999999999999 }}", "line 1, column 4", "integer literal too large"},
      {"\xc3\xa9\xc3\xa9 {{ a $ b }}", "line 1, column 9", "unexpected character '$'"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { (void)Template::parse(c.source, "model.gguf"); });
    EXPECT_NE(msg.find("model.gguf: "), std::string::npos) << c.source << ": " << msg;
    EXPECT_NE(msg.find(c.where), std::string::npos) << c.source << ": " << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << c.source << ": " << msg;
  }
}

TEST(Jinja, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of([&] { (void)Template::parse(deep, "t"); }).find("nests deeper than"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 3000; ++i) blocks += "{% if 1 %}";
  EXPECT_NE(error_of([&] { (void)Template::parse(blocks, "t"); }).find("nests deeper than"), std::string::npos);
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  jinja::RenderOptions o;
  o.limits.max_loop_iterations = 10'000;
  o.limits.max_output_bytes = 1 << 16;
  o.limits.max_call_depth = 50;
  auto fails_with = [&](const std::string& src, const std::string& what) {
    const std::string msg = error_of([&] { (void)Template::parse(src, "t.jinja").render({}, o); });
    EXPECT_NE(msg.find(what), std::string::npos) << src << ": " << msg;
    EXPECT_NE(msg.find("t.jinja: line 1"), std::string::npos) << src << ": " << msg;
  };
  fails_with("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", "loop iterations");
  fails_with("{% for a in range(100000) %}x{% endfor %}", "loop iterations");
  fails_with("{% for a in range(9000) %}{{ 'xxxxxxxxxx' }}{% endfor %}", "exceed 65536 bytes");
  fails_with("{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
             "exceed 65536 bytes");
  fails_with("{{ 'x' * 100000000 }}", "exceed 65536 bytes");
  fails_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nest deeper than 50");
  fails_with("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
             "exceed 65536 bytes");
  fails_with("{% set ns = namespace() %}{% set ns.a = ns %}{{ ns | tojson }}", "not JSON serializable");
  fails_with("{% set ns = namespace() %}{% set ns.a = [ns] %}{{ ns }}", "nests deeper than");
}

TEST(Jinja, RendersConcurrently) {
  const Template t = Template::parse("{% for m in messages %}{{ m.content ~ loop.index }}{% endfor %}", "t");
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (size_t i = 0; i < outs.size(); ++i)
    threads.emplace_back([&, i] { outs[i] = joined(t.render(chat_vars(std::to_string(i)))); });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i], std::to_string(i) + "1");
}

}  // namespace
}  // namespace tally
