// libFuzzer target for the tokenizers: arbitrary bytes (any UTF-8 validity)
// are encoded with special-token parsing off and on, decoded, and streamed.
// Checks, beyond "no crash": decoding gives the input back (minus bytes the
// vocabulary cannot spell), and streaming equals sanitized decoding.
//
// Vocabulary: $TALLY_FUZZ_VOCAB, else the StarCoder vocabulary of the shared
// tokenizer test data (the same pre-tokenizer path as SmolLM2). The
// SentencePiece test vocabulary next to it is fuzzed too when present.
#include <cstdint>
#include <cstdlib>
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
  std::unique_ptr<tally::GgufFile> file;
  std::unique_ptr<tally::Tokenizer> tok;
  bool representable[256] = {};  // bytes the vocabulary has a token for (byte-level BPE)
};

std::unique_ptr<Loaded> load(const std::string& path) {
  if (!std::ifstream(path).good()) return nullptr;
  auto l = std::make_unique<Loaded>();
  l->file = std::make_unique<tally::GgufFile>(path);
  l->tok = std::make_unique<tally::Tokenizer>(tally::Tokenizer::from_gguf(*l->file));
  for (int b = 0; b < 256; ++b)
    l->representable[b] = !l->tok->encode(std::string(1, static_cast<char>(b)), false, false).empty();
  return l;
}

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
  std::abort();
}

void check(const Loaded& l, const std::string& text) {
  const tally::Tokenizer& tok = *l.tok;
  const bool bpe = tok.model_name() == "gpt2";
  std::string spelled;  // the input without the bytes the vocabulary cannot spell
  for (char c : text)
    if (!bpe || l.representable[static_cast<uint8_t>(c)]) spelled.push_back(c);

  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, true, parse_special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) violated("id out of range");
    const std::string rendered = tok.decode(ids, true);
    const std::string plain = tok.decode(ids, false);
    if (bpe && rendered != spelled) violated("byte-level round trip");
    // SentencePiece: a literal U+2581 in the text decodes as a space.
    if (!bpe && !parse_special && text.find("\xE2\x96\x81") == std::string::npos && plain != text)
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

  const std::string text(reinterpret_cast<const char*>(data), size);
  check(*bpe, text);
  if (spm) check(*spm, text);
  return 0;
}
