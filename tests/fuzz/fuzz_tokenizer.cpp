// libFuzzer target for the tokenizers: arbitrary bytes (any UTF-8 validity)
// are encoded with special-token parsing off and on, decoded, and streamed.
// Checks, beyond "no crash": decoding gives the input back, except that each
// character or ill-formed sequence with a byte the vocabulary cannot spell is
// U+FFFD (and counted as replaced), and streaming equals sanitized decoding.
//
// Vocabulary: $TALLY_FUZZ_VOCAB, else the StarCoder vocabulary of the shared
// tokenizer test data (the same pre-tokenizer path as SmolLM2). The
// SentencePiece test vocabulary next to it is fuzzed too when present, and
// a copy of it whose byte tokens are plain text (no byte fallback): there
// every <unk> in an encoding is a character counted as unknown, and an
// encoding without one decodes to the input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

#ifndef TALLY_SHARED_DIR
#define TALLY_SHARED_DIR TALLY_SOURCE_DIR "/../shared"
#endif

namespace {

struct Loaded {
  std::vector<uint8_t> bytes;  // the file's image, when made in memory
  std::unique_ptr<tally::GgufFile> file;
  std::unique_ptr<tally::Tokenizer> tok;
  bool representable[256] = {};  // bytes the vocabulary has a token for (byte-level BPE)
};

// `path` as a file, or, with `no_byte_tokens`, an image of it whose token
// types 6 (BYTE) are 1 (NORMAL): the token_type array is found by its key.
std::unique_ptr<Loaded> load(const std::string& path, bool no_byte_tokens = false) {
  if (!std::ifstream(path).good()) return nullptr;
  auto l = std::make_unique<Loaded>();
  if (no_byte_tokens) {
    std::ifstream in(path, std::ios::binary);
    l->bytes.assign(std::istreambuf_iterator<char>(in), {});
    const std::string key = "tokenizer.ggml.token_type";
    const auto at = std::search(l->bytes.begin(), l->bytes.end(), key.begin(), key.end());
    if (at == l->bytes.end()) return nullptr;
    uint64_t count = 0;
    const size_t values = static_cast<size_t>(at - l->bytes.begin()) + key.size() + 4 + 4 + 8;  // type, element type, count
    std::memcpy(&count, l->bytes.data() + values - 8, 8);
    for (uint64_t i = 0; i < count; ++i) {
      int32_t t;
      std::memcpy(&t, l->bytes.data() + values + 4 * i, 4);
      if (t == 6) t = 1;
      std::memcpy(l->bytes.data() + values + 4 * i, &t, 4);
    }
    l->file = std::make_unique<tally::GgufFile>(l->bytes.data(), l->bytes.size(), path + " (no byte tokens)");
  } else {
    l->file = std::make_unique<tally::GgufFile>(path);
  }
  l->tok = std::make_unique<tally::Tokenizer>(tally::Tokenizer::from_gguf(*l->file));
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    l->representable[b] = l->tok->decode(l->tok->encode(one, false, false)) == one;
  }
  return l;
}

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
  std::abort();
}

void check(const Loaded& l, const std::string& text) {
  const tally::Tokenizer& tok = *l.tok;
  const bool bpe = tok.model_name() == "gpt2";
  // The input as the vocabulary spells it: every UTF-8 unit (a character, an
  // ill-formed subpart, an incomplete tail) with a byte it has no token for is U+FFFD.
  std::string spelled;
  size_t replaced = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t len = tally::utf8::decode(std::string_view(text).substr(i)).len;
    bool ok = true;
    for (size_t k = i; k < i + len; ++k) ok = ok && (!bpe || l.representable[static_cast<uint8_t>(text[k])]);
    if (ok) {
      spelled.append(text, i, len);
    } else {
      spelled.append(tally::utf8::kReplacement);
      ++replaced;
    }
    i += len;
  }

  for (bool parse_special : {false, true}) {
    tally::Tokenizer::EncodeStats stats;
    const std::vector<int32_t> ids = tok.encode(text, true, parse_special, &stats);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) violated("id out of range");
    const std::string rendered = tok.decode(ids, true);
    const std::string plain = tok.decode(ids, false);
    if (bpe && rendered != spelled) violated("byte-level round trip");
    if (bpe && !parse_special && stats.replaced != replaced) violated("replacement count");
    // SentencePiece: a literal U+2581 in the text decodes as a space.
    size_t unknown = 0;
    for (int32_t id : ids) unknown += id == tok.unk_id();
    if (!parse_special && unknown != stats.unknown) violated("unknown-token count");
    if (stats.unknown > 0 && stats.first_unknown >= text.size()) violated("unknown-token offset");
    if (!bpe && !parse_special && unknown == 0 && text.find("\xE2\x96\x81") == std::string::npos && plain != text)
      violated("SentencePiece round trip");

    tally::StreamDecoder sd(tok, false);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      if (!tally::utf8::is_valid(piece)) violated("stream emitted invalid UTF-8");
      streamed += piece;
    }
    streamed += sd.flush();
    if (streamed != tally::utf8::sanitize(plain)) violated("stream != sanitize(decode)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Loaded> bpe = [] {
    const char* env = std::getenv("TALLY_FUZZ_VOCAB");
    auto l = load(env != nullptr ? std::string(env)
                                 : std::string(TALLY_SHARED_DIR) +
                                       "/testdata/tokenizer/ggml-vocab-starcoder.gguf");
    if (!l) {
      std::fprintf(stderr, "fuzz_tokenizer: cannot read the vocabulary (set TALLY_FUZZ_VOCAB)\n");
      std::abort();
    }
    return l;
  }();
  static const std::unique_ptr<Loaded> spm =
      std::getenv("TALLY_FUZZ_VOCAB") != nullptr
          ? nullptr
          : load(std::string(TALLY_SHARED_DIR) + "/testdata/tokenizer/ggml-vocab-llama-spm.gguf");

  static const std::unique_ptr<Loaded> spm_no_bytes =
      spm ? load(std::string(TALLY_SHARED_DIR) + "/testdata/tokenizer/ggml-vocab-llama-spm.gguf", true) : nullptr;

  const std::string text(reinterpret_cast<const char*>(data), size);
  check(*bpe, text);
  if (spm) check(*spm, text);
  if (spm_no_bytes) check(*spm_no_bytes, text);
  return 0;
}
