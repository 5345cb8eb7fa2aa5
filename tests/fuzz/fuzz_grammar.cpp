// libFuzzer target for src/grammar: the JSON schema -> grammar path (the
// whitelist walk, then the engine's converter) and the GBNF parser. The first
// byte picks the path; the rest is the schema or grammar text, up to a 0x00
// after which come bytes to match. Any input must compile or throw
// tally::Error with one bounded line (an engine exception of another type
// escaping is a crash); a compiled grammar must mask, accept and end
// consistently: a byte the mask allows is accepted, one it refuses is not.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_checks.h"
#include "grammar/grammar.h"

namespace {

constexpr const char* kTarget = "fuzz_grammar";

[[noreturn]] void violated(const char* what, const std::string& detail) { tally_fuzz::violated(kTarget, what, detail); }

// The 256 bytes and an end token (256). A fresh one per input: the
// compiler's cache would otherwise grow with every input.
tally::grammar::Vocabulary byte_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  t.emplace_back("");
  return tally::grammar::Vocabulary(t, 257, {256});
}

void exercise(const tally::grammar::Constraint& c, const std::string& input, const std::string& text) {
  tally::grammar::State s(c);
  std::vector<float> logits(257);
  for (unsigned char b : text) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    const int64_t allowed = s.mask(logits);
    if (allowed < 0 || allowed > 257) violated("mask count", input);
    const bool ok = logits[b] == 0.0f;
    if (s.accept(b) != ok) violated("accept disagrees with the mask", input);
    if (!ok) return;
  }
  std::fill(logits.begin(), logits.end(), 0.0f);
  s.mask(logits);
  if ((logits[256] == 0.0f) != s.can_end()) violated("end token allowed iff the text is whole", input);
  if (s.can_end()) {
    if (!s.accept(256) || !s.finished()) violated("end token refused where the grammar may end", input);
    s.rollback(1);
    if (s.finished()) violated("rollback past the end token", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = input.find('\0');
  const std::string source = input.substr(0, cut);
  const std::string text = cut == std::string::npos ? "" : input.substr(cut + 1, 64);
  const tally::grammar::Vocabulary v = byte_vocab();
  try {
    switch (data[0] % 3) {
      case 0: {
        nlohmann::ordered_json schema;
        try {
          schema = nlohmann::ordered_json::parse(source);
        } catch (const nlohmann::json::exception&) {
          return 0;
        }
        exercise(tally::grammar::Constraint::json_schema(v, schema), input, text);
        break;
      }
      case 1: exercise(tally::grammar::Constraint::gbnf(v, source), input, text); break;
      default: {
        // Literal text around a schema (tool calls' shape).
        const std::vector<tally::grammar::Part> parts = {
            tally::grammar::Part::literal(source),
            tally::grammar::Part::json_schema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})")),
            tally::grammar::Part::literal("\n")};
        exercise(tally::grammar::Constraint::sequence(v, parts), input, text);
        // Several of them, the literal also the separator (parallel tool calls' shape).
        exercise(tally::grammar::Constraint::one_or_more(v, parts, source), input, text);
        break;
      }
    }
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
  }
  return 0;
}
