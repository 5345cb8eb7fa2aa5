#pragma once
// Text <-> token ids for the two GGUF tokenizer families: byte-level BPE
// (tokenizer.ggml.model = "gpt2") and SentencePiece (= "llama").
// Immutable after construction; copies share the same tables; encode and
// decode are safe to call concurrently from several threads.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tally {

class GgufFile;
struct TextFragment;

// A piece of a rendered chat prompt: text the chat template wrote, or text
// that came from the conversation (message contents, tool calls, tools).
struct PromptSegment {
  std::string text;
  bool from_content = false;
};

class Tokenizer {
 public:
  // Reads the tokenizer.* metadata. Throws tally::Error naming the file and
  // the key at fault (unknown model or pre-tokenizer, missing merges, ...).
  static Tokenizer from_gguf(const GgufFile& f);

  // add_special: prepend BOS / append EOS as the file's add_bos_token /
  // add_eos_token say. parse_special: text of control tokens (e.g.
  // "<|im_start|>") becomes that token; otherwise it is tokenized as text.
  // User-defined tokens are always matched. Any bytes are accepted: ill-formed
  // UTF-8 is tokenized byte by byte. Nothing is dropped: in a byte-level
  // vocabulary, a character (or ill-formed sequence) with a byte that has no
  // token becomes U+FFFD, the replacement character (throws if the vocabulary
  // cannot spell U+FFFD either); `stats` counts them. A character a
  // SentencePiece vocabulary cannot spell becomes byte tokens, or, in a
  // vocabulary without them, <unk> as SentencePiece does (the model was
  // trained so); `stats` counts those too.
  struct EncodeStats {
    size_t replaced = 0;        // characters replaced by U+FFFD
    size_t first_replaced = 0;  // byte offset of the first of them in the text
    size_t unknown = 0;         // characters that became the unknown token
    size_t first_unknown = 0;   // byte offset of the first of them in the text
  };
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              EncodeStats* stats = nullptr) const;

  // A rendered chat prompt. The template's text is tokenized as encode with
  // parse_special does. In the conversation's text, control-token texts are
  // plain text, and so are added tokens that occur in `markup` (the
  // template's literals: markers such as Qwen's "<tool_call>" that are not
  // control tokens); each such occurrence is tokenized on its own, as HF's
  // apply_chat_template(sanitize_control_tokens=True) does. A prompt without
  // such text gets the ids of encode(its text, add_special, true).
  std::vector<int32_t> encode_prompt(std::span<const PromptSegment> prompt, bool add_special,
                                     std::string_view markup = {}, EncodeStats* stats = nullptr) const;

  // The bytes the ids stand for (not necessarily valid UTF-8 for an arbitrary
  // id sequence). Control tokens render as their text only when
  // render_special. Throws tally::Error on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  std::string token_text(int32_t id) const;  // raw vocabulary string
  // What decode emits for this id on its own, except that decode also drops
  // the leading space SentencePiece adds to the first piece.
  std::string token_bytes(int32_t id, bool render_special) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none
  int32_t unk_id() const;  // -1 if none
  bool adds_bos() const;   // encode with add_special prepends BOS
  bool is_end_of_generation(int32_t id) const;  // eos, eot, <|im_end|>, <|endoftext|>, ...
  bool is_control(int32_t id) const;
  // Ids of unused tokens (the rows a converter pads the vocabulary with up to
  // the embedding's size, reserved slots such as Gemma's <unusedN>): no text
  // stands for them, so they are never generated.
  const std::vector<int32_t>& unused_ids() const;
  const std::string& model_name() const;  // "gpt2" | "llama"
  const std::string& pre_name() const;

  // Whether decode drops one leading space from the first non-empty piece
  // (SentencePiece models that add a space prefix when encoding).
  bool strips_leading_space() const;

 private:
  struct Impl;
  void check_length(size_t bytes) const;
  std::vector<int32_t> encode_fragments(std::string_view text, const std::vector<TextFragment>& frags,
                                        bool add_special, EncodeStats* stats) const;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tally
