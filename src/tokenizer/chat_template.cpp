#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/gguf.h"

namespace tally {
namespace {


// The text of the special token whose id is stored under `key`, or "".
std::string token_text(const GgufFile& f, std::string_view key) {
  if (!f.has(key) || !f.has("tokenizer.ggml.tokens")) return {};
  const uint64_t id = f.get_u64(key);
  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  if (id >= tokens.size()) return {};
  return tokens[id].as_string("tokenizer.ggml.tokens");
}

}  // namespace

ChatTemplate ChatTemplate::from_gguf(const GgufFile& f, std::string_view fallback, std::string fallback_origin) {
  const std::string bos = token_text(f, "tokenizer.ggml.bos_token_id");
  const std::string eos = token_text(f, "tokenizer.ggml.eos_token_id");
  if (!f.has("tokenizer.chat_template")) {
    if (!fallback.empty()) {
      ChatTemplate t = from_source(fallback, std::move(fallback_origin), bos, eos);
      t.fallback_ = true;
      return t;
    }
    fail("{}: no chat template in this file (missing tokenizer.chat_template)", f.path());
  }
  return from_source(f.get_string("tokenizer.chat_template"), f.path() + ": tokenizer.chat_template", bos, eos);
}

ChatTemplate ChatTemplate::from_source(std::string_view source, std::string origin, std::string bos_token,
                                       std::string eos_token) {
  ChatTemplate t;
  t.tmpl_ = jinja::Template::parse(source, std::move(origin));
  t.source_ = std::string(source);
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  for (const std::string& lit : t.tmpl_.literals()) {
    t.markup_ += lit;
    t.markup_.push_back('\0');
  }
  return t;
}

nlohmann::ordered_json ChatTemplate::to_json(std::span<const ChatMessage> msgs) {
  auto out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : msgs) {
    nlohmann::ordered_json j = {{"role", m.role}};
    const bool calls = !m.tool_calls.is_null();
    if (!(calls && m.content.empty())) j["content"] = m.content;
    if (calls) j["tool_calls"] = m.tool_calls;
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<PromptSegment> ChatTemplate::render_segments(const nlohmann::ordered_json& messages,
                                                         bool add_generation_prompt,
                                                         const nlohmann::ordered_json& tools) const {
  std::vector<jinja::Variable> vars = {
      {"messages", messages, true},
      {"tools", tools, true},
      {"documents", nullptr, false},
      {"add_generation_prompt", add_generation_prompt, false},
  };
  // HF passes the special tokens the tokenizer has; a missing one is undefined.
  if (!bos_.empty()) vars.push_back({"bos_token", bos_, false});
  if (!eos_.empty()) vars.push_back({"eos_token", eos_, false});
  std::vector<jinja::Segment> segs;
  try {
    segs = tmpl_.render(vars);
  } catch (const jinja::TemplateError& e) {
    throw jinja::TemplateError(fmt::format("the model's chat template refuses these messages: {}", e.what()));
  }
  std::vector<PromptSegment> out;
  for (jinja::Segment& s : segs) out.push_back({std::move(s.text), s.from_input});
  return out;
}

std::vector<PromptSegment> ChatTemplate::render_segments(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                                         const nlohmann::ordered_json& tools) const {
  return render_segments(to_json(msgs), add_generation_prompt, tools);
}

std::string ChatTemplate::render(std::span<const ChatMessage> msgs, bool add_generation_prompt) const {
  std::string text;
  for (const PromptSegment& s : render_segments(msgs, add_generation_prompt)) text += s.text;
  return text;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tok, std::vector<PromptSegment> prompt) const {
  // The tokenizer adds BOS itself: drop the one the template writes first.
  if (tok.adds_bos() && tok.bos_id() >= 0 && !prompt.empty() && !prompt[0].from_content) {
    const std::string bos = tok.token_text(tok.bos_id());
    if (!bos.empty() && prompt[0].text.compare(0, bos.size(), bos) == 0) prompt[0].text.erase(0, bos.size());
  }
  return tok.encode_prompt(prompt, /*add_special=*/true, markup_);
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                          bool add_generation_prompt, const nlohmann::ordered_json& tools) const {
  return encode(tok, render_segments(msgs, add_generation_prompt, tools));
}

}  // namespace tally
