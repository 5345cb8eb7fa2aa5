#pragma once
// Renders a conversation into the prompt text a model was trained on. There
// is no Jinja engine: the GGUF's tokenizer.chat_template is recognised as one
// of the families below and rendered by fixed code.
//   "chatml"                 <|im_start|>{role}\n{content}<|im_end|>\n per message
//   "chatml-default-system"  the same, plus a default system turn (taken from
//                            the template, e.g. SmolLM2's) inserted when the
//                            first message is not a system message
//   "gemma"                  <start_of_turn>{user|model}\n{content, trimmed}<end_of_turn>\n,
//                            a system message put before the first user turn's
//                            content with a blank line (Gemma 3's template)
// Immutable after construction.
#include <span>
#include <string>
#include <string_view>

namespace tally {

class GgufFile;

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Throws tally::Error when the file has no tokenizer.chat_template or when
  // it is not a supported family (the message quotes its first ~60 chars). A
  // gemma3 file without one gets "gemma", its architecture's template.
  static ChatTemplate from_gguf(const GgufFile& f);
  // The same from template text; `origin` names where it came from in errors.
  static ChatTemplate from_source(std::string_view source, std::string_view origin);

  // With add_generation_prompt the text ends with the assistant's turn opening
  // ("<|im_start|>assistant\n", "<start_of_turn>model\n").
  std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt) const;

  const std::string& family() const { return family_; }
  const std::string& default_system() const { return default_system_; }  // "" if none

 private:
  std::string family_;
  std::string default_system_;
};

}  // namespace tally
