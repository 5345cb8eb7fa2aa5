#pragma once
// Renders a conversation into the prompt a model was trained on by running
// the model's own chat template (a Jinja program: GGUF tokenizer.chat_template,
// or an HF folder's chat_template.jinja / tokenizer_config.json) with the
// variables Hugging Face's apply_chat_template passes: messages, tools,
// add_generation_prompt, bos_token, eos_token. The rendering equals HF's byte
// for byte (jinja/template.h).
//
// Each piece of the prompt remembers whether the template wrote it or it came
// from the conversation, and encode() tokenizes the conversation's text as
// plain text: a message that spells "<|im_end|>" cannot close its turn (as in
// OpenAI's API). The template's own markers stay control tokens.
//
// A file without a template may get its architecture's (a Gemma 3 base
// model gets Gemma 3's instruction template: model/architecture.h);
// is_fallback() says so, so that a chat can warn.
// Immutable after construction; render/encode may run on several threads.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace tally {

class GgufFile;

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;
  std::string content;
  // OpenAI's tool calls of an assistant message ([{"id", "type", "function":
  // {"name", "arguments"}}]); null when none. With calls and empty content,
  // the message has no content key, as HF passes OpenAI's content: null.
  nlohmann::ordered_json tool_calls;
  std::string name;          // a tool message's function name ("" : none)
  std::string tool_call_id;  // a tool message's call id ("" : none)
};

class ChatTemplate {
 public:
  // The file's template, or, when it has none, `fallback` (the architecture's
  // own, model/architecture.h; is_fallback() then says so). Throws
  // tally::Error when there is neither, or the template does not parse
  // (naming line and column).
  static ChatTemplate from_gguf(const GgufFile& f, std::string_view fallback = {}, std::string fallback_origin = {});
  // From template text; `origin` names it in errors; bos/eos are the texts
  // of the model's special tokens ("" when it has none).
  static ChatTemplate from_source(std::string_view source, std::string origin, std::string bos_token = {},
                                  std::string eos_token = {});

  // Throws tally::Error when the template refuses the conversation
  // (raise_exception: jinja::TemplateError, with the template's message) or
  // fails on it. `tools`: null, or OpenAI's list of tool definitions.
  std::vector<PromptSegment> render_segments(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                             const nlohmann::ordered_json& tools = nullptr) const;
  // The same for messages given as JSON objects, passed to the template as they are.
  std::vector<PromptSegment> render_segments(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                             const nlohmann::ordered_json& tools) const;
  // The prompt's text.
  std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt) const;

  // The prompt's token ids. The tokenizer's BOS is added when it adds one,
  // and a BOS the template writes first is then not doubled (as llama.cpp).
  std::vector<int32_t> encode(const Tokenizer& tok, std::span<const ChatMessage> msgs, bool add_generation_prompt,
                              const nlohmann::ordered_json& tools = nullptr) const;
  std::vector<int32_t> encode(const Tokenizer& tok, std::vector<PromptSegment> prompt) const;

  // The model has no template of its own: it is a base model, chatted with
  // through its family's instruction template.
  bool is_fallback() const { return fallback_; }
  // The template's text (what form it shows tool calls in is read from it).
  const std::string& source() const { return source_; }

  // The messages as the template sees them.
  static nlohmann::ordered_json to_json(std::span<const ChatMessage> msgs);

 private:
  jinja::Template tmpl_;
  std::string bos_, eos_;
  std::string source_;
  std::string markup_;  // every literal of the template, '\0'-separated
  bool fallback_ = false;
};

}  // namespace tally
