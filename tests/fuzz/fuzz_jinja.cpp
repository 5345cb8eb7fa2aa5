// libFuzzer target for the Jinja engine: input is a template, then (after a
// NUL byte) a JSON conversation: {"messages": [...], "tools": [...]} or a
// list of messages. Any input must parse and render, or fail with a
// tally::Error whose message is one bounded line; a render stays within its
// limits (no hang, no runaway memory: the limits here are small), its
// segments alternate in provenance, and it is deterministic.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "fuzz_checks.h"
#include "jinja/template.h"

namespace {

constexpr const char* kTarget = "fuzz_jinja";

[[noreturn]] void violated(const char* what, const std::string& detail) { tally_fuzz::violated(kTarget, what, detail); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi <|im_end|>"}}});
  nlohmann::ordered_json tools = nullptr;
  if (nul != std::string::npos) {
    const auto j = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (j.is_array()) messages = j;
    if (j.is_object()) {
      if (j.contains("messages")) messages = j["messages"];
      if (j.contains("tools")) tools = j["tools"];
    }
  }
  tally::jinja::Template t;
  try {
    t = tally::jinja::Template::parse(source, "fuzz.jinja");
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
    return 0;
  }
  const std::vector<tally::jinja::Variable> vars = {{"messages", messages, true},
                                                    {"tools", tools, true},
                                                    {"add_generation_prompt", true, false},
                                                    {"bos_token", "<s>", false},
                                                    {"eos_token", "</s>", false}};
  tally::jinja::RenderOptions o;
  o.limits.max_output_bytes = size_t{1} << 20;
  o.limits.max_loop_iterations = 20'000;
  o.limits.max_call_depth = 40;
  o.now = 1721995200;
  std::vector<tally::jinja::Segment> a;
  try {
    a = t.render(vars, o);
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
    return 0;
  }
  size_t total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].text.empty()) violated("empty segment", source);
    if (i > 0 && a[i].from_input == a[i - 1].from_input) violated("adjacent segments of one provenance", source);
    total += a[i].text.size();
  }
  if (total > o.limits.max_output_bytes) violated("output over the limit", source);
  const auto b = t.render(vars, o);
  if (b.size() != a.size()) violated("render not deterministic", source);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].text != b[i].text || a[i].from_input != b[i].from_input) violated("render not deterministic", source);
  return 0;
}
