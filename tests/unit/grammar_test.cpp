// src/grammar: compiled schemas agree with python-jsonschema on the texts of
// tests/fixtures/grammar/schema_cases.json (both ways where the text is
// written as the grammar writes JSON, and never accepting an invalid one);
// llama.cpp's own GBNF grammars parse and match what they describe; masks
// allow only tokens that keep the text a prefix of a sentence (random walks
// over the allowed tokens of a real vocabulary end in valid JSON); each bad
// schema or grammar is refused with a one-line error naming where.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "model_test_support.h"
#include "runtime/generation.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace tally {
namespace {

using grammar::Constraint;
using grammar::State;
using grammar::Vocabulary;
using json = nlohmann::ordered_json;  // schemas keep their properties' order

// A vocabulary of the 256 bytes, an end token (256) and three padding rows:
// every text can be spelled, one byte per token.
const Vocabulary& byte_vocab() {
  static const Vocabulary v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    t.emplace_back("");  // the end token
    return Vocabulary(t, 260, {256});
  }();
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing " + path);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string fixture(const std::string& rel) { return read_file(std::string(TALLY_FIXTURES_DIR) + "/" + rel); }

TEST(GrammarSchema, AgreesWithJsonschemaOnTheHeldCases) {
  const json all = json::parse(fixture("grammar/schema_cases.json"));
  int checked = 0, valid = 0;
  for (const json& s : all["schemas"]) {
    const Constraint c = Constraint::json_schema(byte_vocab(), s["schema"]);
    for (const json& k : s["cases"]) {
      const std::string text = k["text"];
      const bool want = k["valid"], canonical = k["canonical"];
      const bool got = c.matches(text);
      if (canonical) {
        EXPECT_EQ(got, want) << s["name"] << ": " << text;
      } else if (got) {
        EXPECT_TRUE(want) << s["name"] << ": the grammar accepts an invalid text: " << text;
      }
      ++checked;
      valid += want;
    }
  }
  EXPECT_GT(checked, 150);
  EXPECT_GT(valid, 30);  // the cases hold both kinds
  EXPECT_LT(valid, checked - 30);
}

TEST(GrammarSchema, PropertiesComeInTheSchemasOrder) {
  const Constraint c = Constraint::json_schema(byte_vocab(), json::parse(R"({"type":"object","properties":{
      "zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"],"additionalProperties":false})"));
  EXPECT_TRUE(c.matches(R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(c.matches(R"({"alpha": 2, "zeta": 1})"));
}

TEST(GrammarSchema, JsonObjectTakesAnyObjectOnly) {
  const Constraint c = Constraint::json_object(byte_vocab());
  for (const char* ok : {R"({})", R"({"a": [1, {"b": null}], "c": "d\u00e9"})", "{\n  \"x\": -1.5e3\n}"})
    EXPECT_TRUE(c.matches(ok)) << ok;
  for (const char* bad : {"[]", "1", R"("s")", R"({"a" 1})", R"({"a": 1,})", "{} x", "{"}) EXPECT_FALSE(c.matches(bad)) << bad;
}

// JSON strings hold no raw control character, with a length bound or without
// (the engine's bounded strings took them until build_xgrammar.sh's fix).
TEST(GrammarSchema, StringsHoldNoRawControlCharacters) {
  const Constraint bounded = Constraint::json_schema(byte_vocab(), json::parse(R"({"type":"string","maxLength":4})"));
  EXPECT_TRUE(bounded.matches("\"ab\""));
  for (const char* bad : {"\"a\x01\"", "\"a\tb\"", "\"\x1f\"", "\"a\nb\""}) EXPECT_FALSE(bounded.matches(bad)) << bad;
  const Constraint any = Constraint::json_object(byte_vocab());
  EXPECT_TRUE(any.matches("{\"a\": \"b\\tc\"}"));
  EXPECT_FALSE(any.matches("{\"a\": \"b\tc\"}"));
  EXPECT_FALSE(any.matches("{\"a\x01\": 1}"));
}

TEST(GrammarSchema, WhitespaceRunsAreBounded) {
  const Constraint c = Constraint::json_object(byte_vocab());
  EXPECT_TRUE(c.matches("{" + std::string(20, ' ') + "}"));
  EXPECT_FALSE(c.matches("{" + std::string(21, ' ') + "}"));  // a model cannot pad forever
}

// Each refusal: a one-line tally::Error that contains `where`.
void expect_refused(const json& schema, const std::string& where) {
  try {
    Constraint::json_schema(byte_vocab(), schema);
    ADD_FAILURE() << "accepted: " << schema.dump();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(where), std::string::npos) << schema.dump() << " -> " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(GrammarSchema, RefusesWhatItCannotEnforce) {
  expect_refused(json::parse(R"({"type":"object","properties":{"x":{"type":"object","patternProperties":{"a":{}}}}})"),
                 "/properties/x/patternProperties");
  expect_refused(json::parse(R"({"type":"array","uniqueItems":true})"), "/uniqueItems");
  expect_refused(json::parse(R"({"type":"string","format":"ipv4"})"), "/format");
  expect_refused(json::parse(R"({"type":"integer","multipleOf":3})"), "/multipleOf");
  expect_refused(json::parse(R"({"anyOf":[{"type":"string"}],"properties":{}})"), "/properties");
  expect_refused(json::parse(R"({"type":"object","anyOf":[{"required":["a"]}]})"), "/anyOf");
  expect_refused(json::parse(R"({"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}},"type":"string"})"), "/$ref");
  expect_refused(json::parse(R"({"type":"string","pattern":"a+","maxLength":3})"), "/pattern");
  expect_refused(json::parse(R"({"properties":{"a":{"type":"string"}}})"), "/properties");  // no type: any value
  expect_refused(json::parse(R"({"$ref":"https://example.com/s.json"})"), "/$ref");
  expect_refused(json::parse(R"({"allOf":[{"type":"string"},{"maxLength":2}]})"), "/allOf");
  expect_refused(json::parse(R"({"not":{"type":"string"}})"), "/not");
  expect_refused(json::parse(R"({"type":"array","items":[{"type":"string"}]})"), "/items");
  expect_refused(json::parse(R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})"), "/oneOf/1");
  expect_refused(json::parse(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"), "/oneOf/1");
  expect_refused(json::parse(R"({"type":"object","properties":{"a~b/c":{"type":"object","minProperties":1}}})"),
                 "/properties/a~0b~1c/minProperties");
}

TEST(GrammarSchema, OneOfOfDisjointBranchesIsExact) {
  const Constraint c = Constraint::json_schema(byte_vocab(), json::parse(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
      {"type":"object","properties":{"kind":{"const":"b"},"x":{"type":"string"}},"required":["kind","x"]}]})"));
  EXPECT_TRUE(c.matches(R"({"kind": "a", "x": 1})"));
  EXPECT_TRUE(c.matches(R"({"kind": "b", "x": "1"})"));
  EXPECT_FALSE(c.matches(R"({"kind": "a", "x": "1"})"));
}

TEST(GrammarSchema, RefusesSchemasNoValueSatisfies) {
  expect_refused(json::parse(R"({"enum":[]})"), "empty enum");
  expect_refused(json::parse(R"({"type":"object","properties":{"c":{"enum":[]}}})"), "/properties/c/enum");
  expect_refused(json::parse(R"({"type":"array","minItems":3,"maxItems":1})"), "/maxItems");
  expect_refused(json::parse(R"({"type":"string","minLength":5,"maxLength":4})"), "/maxLength");
  expect_refused(json::parse(R"({"not":{}})"), "/not");
  expect_refused(json::parse(R"({"type":[]})"), "/type");
  expect_refused(json::parse("false"), "no value satisfies");
  expect_refused(json::parse(R"({"type":"integer","minimum":1.2,"maximum":1.8})"), "no integer");
  expect_refused(json::parse(R"({"type":"number","exclusiveMinimum":1,"maximum":1})"), "empty number range");
  expect_refused(json::parse(R"({"type":"object","required":["x"],"properties":{"y":{}}})"), "/required/0");
  expect_refused(json::parse(R"({"type":"string","enum":["a",1]})"), "/enum/1");
  expect_refused(json::parse(R"({"anyOf":[]})"), "/anyOf");
}

TEST(GrammarSchema, RefusesWhatIsNotASchema) {
  expect_refused(json::parse(R"("string")"), "not a schema");
  expect_refused(json::parse(R"({"type":"text"})"), "/type");
  expect_refused(json::parse(R"({"type":"object","properties":{"a":3}})"), "/properties/a");
  expect_refused(json::parse(R"({"type":"array","minItems":-1})"), "/minItems");
  expect_refused(json::parse(R"({"$ref":"#/$defs/missing"})"), "points to nothing");
  expect_refused(json::parse(R"({"type":"object","required":"a"})"), "/required");
  json deep = json::object();
  for (int i = 0; i < 100; ++i) deep = json{{"type", "array"}, {"items", deep}};
  expect_refused(deep, "nests deeper");
}

TEST(GrammarGbnf, LlamaCppGrammarsParseAndMatch) {
  const std::string dir = std::string(TALLY_FIXTURES_DIR) + "/grammar/llama_cpp";
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".gbnf") continue;
    EXPECT_NO_THROW(Constraint::gbnf(byte_vocab(), read_file(f.path()))) << f.path();
    ++n;
  }
  EXPECT_GE(n, 8);
  const Constraint arith = Constraint::gbnf(byte_vocab(), read_file(dir + "/arithmetic.gbnf"));
  EXPECT_TRUE(arith.matches("1+2*x = 3\n"));
  EXPECT_TRUE(arith.matches("(a -b) = c\nd = 4\n"));
  EXPECT_FALSE(arith.matches("1+ = 3\n"));
  EXPECT_FALSE(arith.matches("1 = 3"));  // each line ends in a newline
  const Constraint js = Constraint::gbnf(byte_vocab(), read_file(dir + "/json.gbnf"));
  EXPECT_TRUE(js.matches(R"({"a": [1, 2.5, "x\n"], "b": {"c": null}})"));
  EXPECT_FALSE(js.matches(R"({"a" 1})"));
  EXPECT_FALSE(js.matches(R"([1])"));  // its root is an object
  const Constraint list = Constraint::gbnf(byte_vocab(), read_file(dir + "/list.gbnf"));
  EXPECT_TRUE(list.matches("- one\n- two\n"));
}

// GBNF's empty alternatives (llama.cpp's json.gbnf: `ws ::= | " " | ...`), at
// the start, the end and inside a group; strings and classes keep their bars.
TEST(GrammarGbnf, EmptyAlternatives) {
  const Constraint c = Constraint::gbnf(byte_vocab(), "root ::= ( | \"x\" ) y z\ny ::= \"a\" |\n# comment | \nz ::= \"|\" [|] |");
  EXPECT_TRUE(c.matches("a||"));
  EXPECT_TRUE(c.matches("x||"));
  EXPECT_TRUE(c.matches("x"));
  EXPECT_TRUE(c.matches(""));
  EXPECT_FALSE(c.matches("|"));
}

TEST(GrammarGbnf, SyntaxErrorsNameLineAndColumn) {
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"root ::= \"a\"\nb ::= (\"x\"\n", "error at line 3, column 1"},
           {"root ::= \"a\"\nb ::= \"x\" ]\n", "error at line 2, column"},
           {"root ::= undefined_rule", "undefined_rule"},
           {"root ::= [z-a]", "error at line 1, column"},
           {"rot ::= \"a\"", "root"},
           {"root ::= \"unterminated", "error at line 1, column"},
           // Columns of the text as written, past an empty alternative made explicit for the engine.
           {"root ::= | \"a\" (", "error at line 1, column 17"},
           {"ws ::= | \" \"\nroot ::= [z-a]", "error at line 2, column 11"}}) {
    try {
      Constraint::gbnf(byte_vocab(), text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(where), std::string::npos) << text << " -> " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(GrammarSequence, LiteralTextAroundASchema) {
  const json args = json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],
                                    "additionalProperties":false})");
  const std::vector<grammar::Part> parts = {grammar::Part::literal("<tool_call>\n{\"name\": \"f\", \"arguments\": "),
                                            grammar::Part::json_schema(args), grammar::Part::literal("}\n</tool_call>")};
  const Constraint c = Constraint::sequence(byte_vocab(), parts);
  EXPECT_TRUE(c.matches("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(c.matches("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(c.matches("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"town\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(c.matches("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}"));
  // Quotes, backslashes and control characters in a literal are text.
  const std::vector<grammar::Part> odd = {grammar::Part::literal("a\"b\\c\n\x01" "1")};
  EXPECT_TRUE(Constraint::sequence(byte_vocab(), odd).matches("a\"b\\c\n\x01" "1"));
  const std::vector<grammar::Part> bad = {grammar::Part::json_schema(json::parse(R"({"enum":[]})"))};
  EXPECT_THROW(Constraint::sequence(byte_vocab(), bad), Error);
}

TEST(GrammarState, MaskAcceptRollbackAndEnd) {
  const Constraint c = Constraint::json_schema(byte_vocab(), json::parse(R"({"enum":["ab","ac"]})"));
  State s(c);
  std::vector<float> logits(260, 0.0f);
  EXPECT_EQ(s.mask(logits), 1);  // only '"'
  EXPECT_EQ(logits['"'], 0.0f);
  EXPECT_EQ(logits['a'], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[256], -std::numeric_limits<float>::infinity());  // no end yet
  EXPECT_EQ(logits[259], -std::numeric_limits<float>::infinity());  // padding never
  EXPECT_FALSE(s.accept('x'));
  EXPECT_TRUE(s.accept('"'));
  EXPECT_TRUE(s.accept('a'));
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(s.mask(logits), 2);  // 'b' or 'c'
  EXPECT_TRUE(s.accept('c'));
  s.rollback(1);
  EXPECT_TRUE(s.accept('b'));
  EXPECT_TRUE(s.accept('"'));
  EXPECT_TRUE(s.can_end());
  EXPECT_FALSE(s.finished());
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(s.mask(logits), 1);
  EXPECT_EQ(logits[256], 0.0f);  // only the end token now
  EXPECT_TRUE(s.accept(256));
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.accept('"'));
  std::vector<float> wrong(10);
  State t(c);
  EXPECT_THROW(t.mask(wrong), Error);
}

// The walk's JSON against the schema's meaning, checked here by hand.
const char* const kWalkSchema = R"({"type":"object","properties":{
  "n":{"type":"integer","minimum":0,"maximum":99},
  "c":{"enum":["red","green"]},
  "ok":{"type":"boolean"},
  "tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":2}},
  "required":["n","c","ok","tags"],"additionalProperties":false})";

void expect_walk_valid(const std::string& text) {
  json v;
  ASSERT_NO_THROW(v = json::parse(text)) << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 4u) << text;
  ASSERT_TRUE(v["n"].is_number_integer()) << text;
  EXPECT_GE(v["n"].get<int64_t>(), 0);
  EXPECT_LE(v["n"].get<int64_t>(), 99);
  EXPECT_TRUE(v["c"] == "red" || v["c"] == "green") << text;
  EXPECT_TRUE(v["ok"].is_boolean()) << text;
  ASSERT_TRUE(v["tags"].is_array()) << text;
  EXPECT_LE(v["tags"].size(), 2u);
  for (const json& t : v["tags"]) {
    ASSERT_TRUE(t.is_string()) << text;
    const std::string& str = t.get_ref<const std::string&>();
    const auto chars = std::count_if(str.begin(), str.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xc0) != 0x80; });
    EXPECT_LE(chars, 5) << text;
  }
}

// Random walks over the tokens each mask allows, in a real vocabulary
// (SmolLM2's 49,152 byte-level tokens, multi-byte and partial characters
// among them): every walk ends with the end token, in JSON the schema takes.
TEST(GrammarStateModel, RandomWalksOverMasksEndInValidJson) {
  TALLY_NEED_MODEL();
  const Tokenizer& tok = tally_test::shared_tokenizer();
  const int32_t n = static_cast<int32_t>(tally_test::shared_model()->config().n_vocab);
  const Vocabulary v = grammar_vocabulary(tok, n);
  const Constraint c = Constraint::json_schema(v, json::parse(kWalkSchema));
  std::mt19937 rng(7);
  std::vector<float> logits(static_cast<size_t>(n));
  for (int walk = 0; walk < 40; ++walk) {
    State s(c);
    std::vector<int32_t> ids;
    bool ended = false;
    for (int step = 0; step < 4000 && !ended; ++step) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      ASSERT_GT(s.mask(logits), 0);
      std::vector<int32_t> allowed;
      for (int32_t i = 0; i < n; ++i)
        if (logits[static_cast<size_t>(i)] == 0.0f) allowed.push_back(i);
      // Any allowed token, but the end token whenever it is allowed (the walk is bounded by the schema).
      int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      for (int32_t e : v.end_ids())
        if (logits[static_cast<size_t>(e)] == 0.0f) pick = e;
      ASSERT_TRUE(s.accept(pick)) << "a token the mask allowed was refused: " << pick;
      if (s.finished()) {
        ended = true;
      } else {
        ids.push_back(pick);
      }
    }
    ASSERT_TRUE(ended) << "walk " << walk << " did not end: " << tok.decode(ids);
    expect_walk_valid(tok.decode(ids));
  }
}

GenerateOptions greedy(int64_t n, const Tokenizer& tok, int64_t draft_max) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0;
  g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
  g.draft_max = draft_max;
  return g;
}

GenerateResult run(const std::vector<int32_t>& prompt, const GenerateOptions& g) {
  SessionOptions so;
  so.n_ctx = 1024;
  so.logit_rows = g.draft_max + 1;
  Session s(*tally_test::shared_model(), so);
  return generate(s, prompt, g, {}, &tally_test::shared_tokenizer());
}

// A grammar every text is a sentence of leaves greedy decoding as it is,
// token for token, with and without speculative drafts.
TEST(GrammarGeneration, AllowEverythingGrammarChangesNoToken) {
  TALLY_NEED_MODEL();
  const Tokenizer& tok = tally_test::shared_tokenizer();
  const Vocabulary v = grammar_vocabulary(tok, static_cast<int32_t>(tally_test::shared_model()->config().n_vocab));
  const Constraint all = Constraint::gbnf(v, R"(root ::= [\u0000-\U0010ffff]*)");
  for (const char* text : {"The capital of France is", "def fibonacci(n):\n    \"\"\"Return", "Once upon a time, in"}) {
    const std::vector<int32_t> prompt = tok.encode(text, true, false);
    for (int64_t draft : {0, 4}) {
      const GenerateResult want = run(prompt, greedy(48, tok, draft));
      GenerateOptions g = greedy(48, tok, draft);
      g.constraint = all;
      const GenerateResult got = run(prompt, g);
      EXPECT_EQ(got.tokens, want.tokens) << text << " (draft " << draft << ")";
      EXPECT_EQ(got.stop, want.stop);
      EXPECT_GT(want.tokens.size(), 10u);
    }
  }
}

// The model's own output under a schema: valid JSON the schema takes, ended
// by the end token; greedy with drafts (some refused by the grammar) gives the
// same tokens as without; sampled outputs are valid too.
TEST(GrammarGeneration, SchemaOutputIsValidWithAndWithoutDrafts) {
  TALLY_NEED_MODEL();
  const Tokenizer& tok = tally_test::shared_tokenizer();
  const Vocabulary v = grammar_vocabulary(tok, static_cast<int32_t>(tally_test::shared_model()->config().n_vocab));
  const Constraint c = Constraint::json_schema(v, json::parse(kWalkSchema));
  const std::vector<int32_t> prompt =
      tok.encode("A JSON object with a number n, a color c, a flag ok and a list of tags:\n", true, false);
  GenerateOptions g = greedy(300, tok, 0);
  g.constraint = c;
  const GenerateResult plain = run(prompt, g);
  EXPECT_EQ(plain.stop, Finish::EndToken) << plain.text;
  expect_walk_valid(plain.text);
  g.draft_max = 4;
  const GenerateResult drafted = run(prompt, g);
  EXPECT_EQ(drafted.tokens, plain.tokens);
  EXPECT_GT(drafted.drafted, 0);
  g.draft_max = 0;
  g.sampling = SamplerParams{};
  g.sampling.temperature = 1.0f;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    g.sampling.seed = seed;
    const GenerateResult r = run(prompt, g);
    EXPECT_EQ(r.stop, Finish::EndToken) << r.text;
    expect_walk_valid(r.text);
  }
}

}  // namespace
}  // namespace tally
