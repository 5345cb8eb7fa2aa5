#pragma once
// Helpers shared by the tokenizer tests: opening the shared vocabulary-only
// GGUFs and parsing synthetic GGUF images built in memory.
#include <memory>
#include <string>
#include <vector>

#include "gguf_builder.h"
#include "io/gguf.h"

namespace tally::test {

inline const std::string kVocabDir = TALLY_SHARED_DIR "/testdata/tokenizer/";

// A parsed GGUF together with the in-memory image it was parsed from, if any.
struct OwnedGguf {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  const GgufFile& operator*() const { return *file; }
};

inline OwnedGguf gguf_from_bytes(std::vector<uint8_t> bytes, std::string name = "memory.gguf") {
  OwnedGguf g;
  g.bytes = std::move(bytes);
  g.file = std::make_unique<GgufFile>(g.bytes.data(), g.bytes.size(), std::move(name));
  return g;
}

// A vocabulary-only GGUF of the shared tokenizer test data, opened from disk.
inline OwnedGguf load_vocab(const std::string& file_name) {
  OwnedGguf g;
  g.file = std::make_unique<GgufFile>(kVocabDir + file_name);
  return g;
}

}  // namespace tally::test
