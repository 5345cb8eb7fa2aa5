// libFuzzer target for reading tool calls out of a model's reply
// (server/tool_calls.cpp): the reply is outside bytes (whatever the model
// wrote). For every form: no exception; each call names a declared tool and
// its arguments are a compact JSON object; the content begins with the text
// before the held part; a streamed hold never passes the final one; and
// without parallel calls there is at most one call.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_checks.h"
#include "server/tool_calls.h"

namespace {
constexpr const char* kTarget = "fuzz_tool_calls";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tally::server;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> names = {"get_weather", "add"};
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Json}) {
    for (bool parallel : {true, false}) {
      const ToolCallParser p(f, names, parallel);
      const ParsedReply r = p.parse(text);
      const size_t held = p.hold_from(text, true);
      if (held > text.size()) tally_fuzz::violated(kTarget, "hold past the end", text);
      if (p.hold_from(text, false) > held) tally_fuzz::violated(kTarget, "a streamed hold past the final one", text);
      if (r.content.compare(0, held, text, 0, held) != 0) tally_fuzz::violated(kTarget, "content lost its start", text);
      if (r.content.size() > text.size()) tally_fuzz::violated(kTarget, "content longer than the reply", text);
      if (!parallel && r.calls.size() > 1) tally_fuzz::violated(kTarget, "two calls without parallel calls", text);
      for (const ToolCall& c : r.calls) {
        if (c.name != names[0] && c.name != names[1]) tally_fuzz::violated(kTarget, "an undeclared tool", text);
        const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
        if (!args.is_object() || args.dump() != c.arguments) tally_fuzz::violated(kTarget, "arguments", c.arguments);
        if (c.id.size() != 29 || c.id.compare(0, 5, "call_") != 0) tally_fuzz::violated(kTarget, "id", c.id);
      }
      if (r.calls.empty() && r.warning.empty() && r.content != text && !(r.content.empty() && held == text.size()))
        tally_fuzz::violated(kTarget, "text dropped without a call", text);
    }
  }
  return 0;
}
