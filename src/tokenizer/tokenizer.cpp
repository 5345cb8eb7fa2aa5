#include "tokenizer/tokenizer.h"

#include <climits>
#include <optional>

#include "core/error.h"
#include "core/printable.h"
#include "io/gguf.h"
#include "tokenizer/bpe.h"
#include "core/utf8.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace tally {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Texts of control tokens that end a turn in the chat formats we know of.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
    "<end_of_turn>", "<|end_of_text|>", "<EOT>",
};

// Parses "<0xXX>" (SentencePiece byte tokens).
std::optional<uint8_t> parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(s[3]), lo = hex(s[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::string spm_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

}  // namespace

// Everything a tokenizer needs, built once and shared read-only by all copies.
// Exactly one of bpe (with pretok) and spm is set; per-token tables have
// n_vocab entries.
struct Tokenizer::Impl {
  Vocab vocab;
  std::optional<Pretokenizer> pretok;  // gpt2 only
  std::optional<BpeModel> bpe;         // gpt2 only
  std::optional<SpmModel> spm;         // llama only
  std::optional<SpecialTokenSplitter> splitter;
  std::vector<std::string> piece;       // decoded bytes of every token
  std::vector<uint8_t> special_only;    // 1: piece is emitted only when rendering special tokens
  std::vector<uint8_t> end_of_gen;
  std::vector<int32_t> unused;          // ids of TokenType::Unused

  // `at`: the offset of `text` in the whole input, for the stats.
  void encode_text(std::string_view text, size_t at, bool space_prefix, std::vector<int32_t>& out,
                   Tokenizer::EncodeStats& stats) const;
  // `text` with every UTF-8 sequence (or ill-formed subpart) that holds a byte
  // the byte-level vocabulary has no token for replaced by U+FFFD; `at` is
  // the offset of `text` in the whole input, for the stats. Returns `text`
  // itself when nothing needs replacing.
  std::string_view spellable(std::string_view text, size_t at, std::string& scratch,
                             Tokenizer::EncodeStats& stats) const;
};

std::string_view Tokenizer::Impl::spellable(std::string_view text, size_t at, std::string& scratch,
                                            Tokenizer::EncodeStats& stats) const {
  auto spelled = [this](std::string_view s) {
    for (char c : s)
      if (!bpe->has_byte(static_cast<uint8_t>(c))) return false;
    return true;
  };
  if (!bpe || spelled(text)) return text;
  if (!spelled(utf8::kReplacement))
    fail("{}: the text has bytes this vocabulary has no token for, and no token for U+FFFD to replace them with",
         vocab.source);
  scratch.clear();
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8::decode(text.substr(i)).len;  // a character, an ill-formed subpart or the tail
    const std::string_view unit = text.substr(i, len);
    if (spelled(unit)) {
      scratch.append(unit);
    } else {
      if (stats.replaced++ == 0) stats.first_replaced = at + i;
      scratch.append(utf8::kReplacement);
    }
    i += len;
  }
  return scratch;
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  auto impl = std::make_shared<Impl>();
  try {
    impl->vocab = Vocab::from_gguf(f);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(f.path(), 0) == 0) throw;
    fail("{}: {}", f.path(), msg);
  }
  Vocab& v = impl->vocab;
  const auto n = static_cast<size_t>(v.size());

  if (v.model == "gpt2") {
    try {
      impl->pretok.emplace(v.pre);
    } catch (const Error& e) {
      fail("{}: {}", f.path(), e.what());
    }
    if (!f.has("tokenizer.ggml.merges"))
      fail("{}: byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) has no tokenizer.ggml.merges",
           f.path());
    const auto& arr = f.get_array("tokenizer.ggml.merges");
    if (arr.empty())
      fail("{}: byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) has an empty "
           "tokenizer.ggml.merges", f.path());
    std::vector<std::string> merges;
    merges.reserve(arr.size());
    for (size_t k = 0; k < arr.size(); ++k) {
      if (arr[k].type != GgufType::STRING)
        fail("{}: tokenizer.ggml.merges[{}] is a {}, expected a string", f.path(), k, gguf_type_name(arr[k].type));
      merges.push_back(arr[k].s);
    }
    impl->bpe.emplace(v, merges);
  } else if (v.model == "llama") {
    impl->spm.emplace(impl->vocab);
  } else {
    fail("{}: unsupported tokenizer.ggml.model = '{}' (supported: gpt2, llama)", f.path(),
         excerpt(v.model));
  }
  impl->splitter.emplace(v);

  impl->piece.resize(n);
  impl->special_only.assign(n, 0);
  impl->end_of_gen.assign(n, 0);
  const bool spm = v.model == "llama";
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = v.tokens[id];
    switch (v.types[id]) {
      case TokenType::Control:
      case TokenType::Unknown:
        impl->piece[id] = t;
        impl->special_only[id] = 1;
        break;
      case TokenType::UserDefined:
        // Added words are stored as plain text in both families.
        impl->piece[id] = spm ? spm_unescape(t) : t;
        break;
      case TokenType::Byte:
        if (auto b = parse_byte_token(t); spm && b) {
          impl->piece[id] = std::string(1, static_cast<char>(*b));
          break;
        }
        [[fallthrough]];
      default:
        impl->piece[id] = spm ? spm_unescape(t) : byte_unicode::decode(t);
        break;
    }
    if (v.types[id] == TokenType::Unused) impl->unused.push_back(static_cast<int32_t>(id));
    if (v.types[id] == TokenType::Control)
      for (std::string_view eog : kEndOfGenerationTexts)
        if (t == eog) impl->end_of_gen[id] = 1;
  }
  for (int32_t id : {v.eos, v.eot})
    if (id >= 0) impl->end_of_gen[static_cast<size_t>(id)] = 1;
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_text(std::string_view text, size_t at, bool space_prefix, std::vector<int32_t>& out,
                                  Tokenizer::EncodeStats& stats) const {
  if (bpe) {
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    pretok->split(text, pieces);
    for (std::string_view p : pieces) {
      if (pretok->ignore_merges()) {
        const int32_t id = vocab.find(byte_unicode::encode(p));
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      bpe->encode_piece(p, out);
    }
    return;
  }
  std::string escaped;
  escaped.reserve(text.size() + 3 * 8);
  if (space_prefix) escaped.append(kSpmSpace);
  for (char c : text) {
    if (c == ' ')
      escaped.append(kSpmSpace);
    else
      escaped.push_back(c);
  }
  SpmModel::Unknowns unknowns;
  spm->encode(escaped, out, unknowns);
  if (unknowns.count == 0) return;
  // Back from the escaped text (a space is three bytes there) to the input.
  size_t e = space_prefix ? kSpmSpace.size() : 0, i = 0;
  for (; i < text.size() && e < unknowns.first; ++i) e += text[i] == ' ' ? kSpmSpace.size() : 1;
  if (stats.unknown == 0) stats.first_unknown = at + i;
  stats.unknown += unknowns.count;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       EncodeStats* stats) const {
  check_length(text.size());
  std::vector<TextFragment> frags;
  impl_->splitter->split(text, parse_special, frags);
  return encode_fragments(text, frags, add_special, stats);
}

std::vector<int32_t> Tokenizer::encode_prompt(std::span<const PromptSegment> prompt, bool add_special,
                                              std::string_view markup, EncodeStats* stats) const {
  std::string text;
  std::vector<uint8_t> from_content;
  for (const PromptSegment& s : prompt) {
    text += s.text;
    from_content.resize(text.size(), s.from_content ? 1 : 0);
  }
  check_length(text.size());
  std::vector<TextFragment> frags;
  impl_->splitter->split_prompt(text, from_content, markup, frags);
  return encode_fragments(text, frags, add_special, stats);
}

void Tokenizer::check_length(size_t bytes) const {
  // Symbol positions are 32-bit.
  if (bytes > static_cast<size_t>(INT32_MAX / 4))
    fail("text of {} bytes is too long to tokenize at once (limit {} bytes)", bytes, INT32_MAX / 4);
}

std::vector<int32_t> Tokenizer::encode_fragments(std::string_view text, const std::vector<TextFragment>& frags,
                                                 bool add_special, EncodeStats* stats) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && m.vocab.add_bos) out.push_back(m.vocab.bos);
  // SentencePiece adds its space prefix at the start of the text and after
  // every special token, like the reference implementation.
  bool after_special = true;
  EncodeStats local;
  std::string scratch;
  for (const TextFragment& fr : frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      after_special = true;
      continue;
    }
    const std::string_view piece =
        m.spellable(fr.text, static_cast<size_t>(fr.text.data() - text.data()), scratch, stats ? *stats : local);
    m.encode_text(piece, static_cast<size_t>(fr.text.data() - text.data()),
                  m.spm && m.vocab.add_space_prefix && after_special, out, stats ? *stats : local);
    after_special = false;
  }

  if (add_special && m.vocab.add_eos) out.push_back(m.vocab.eos);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  const Impl& m = *impl_;
  std::string out;
  bool strip = strips_leading_space();
  for (int32_t id : ids) {
    m.vocab.check_id(id);
    const auto k = static_cast<size_t>(id);
    if (m.special_only[k] && !render_special) continue;
    std::string_view p = m.piece[k];
    if (p.empty()) continue;
    if (strip && p[0] == ' ') p.remove_prefix(1);
    strip = false;
    out.append(p);
  }
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  impl_->vocab.check_id(id);
  return impl_->vocab.tokens[static_cast<size_t>(id)];
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  impl_->vocab.check_id(id);
  const auto k = static_cast<size_t>(id);
  if (impl_->special_only[k] && !render_special) return {};
  return impl_->piece[k];
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.size(); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos; }
int32_t Tokenizer::unk_id() const { return impl_->vocab.unk; }
const std::vector<int32_t>& Tokenizer::unused_ids() const { return impl_->unused; }
bool Tokenizer::adds_bos() const { return impl_->vocab.add_bos && impl_->vocab.bos >= 0; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return impl_->vocab.valid(id) && impl_->end_of_gen[static_cast<size_t>(id)] != 0;
}

bool Tokenizer::is_control(int32_t id) const {
  return impl_->vocab.valid(id) && impl_->vocab.type(id) == TokenType::Control;
}

const std::string& Tokenizer::model_name() const { return impl_->vocab.model; }
const std::string& Tokenizer::pre_name() const { return impl_->vocab.pre; }

bool Tokenizer::strips_leading_space() const {
  return impl_->spm.has_value() && impl_->vocab.add_space_prefix;
}

}  // namespace tally
