#pragma once
// Helpers shared by the tokenizer tests: loading vocabulary-only GGUFs into
// memory, and building small synthetic vocabularies.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf_builder.h"
#include "io/gguf.h"

namespace tally::test {

inline const std::string kVocabDir = TALLY_SHARED_DIR "/testdata/tokenizer/";

// A GGUF parsed from an in-memory image that it owns.
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

// Vocabulary-only files written by older converters end right after the
// metadata, without padding up to their (empty) data section; the image is
// padded to 32 bytes here so the tokenizer tests do not depend on how the
// reader treats that.
inline OwnedGguf load_vocab(const std::string& file_name) {
  const std::string path = kVocabDir + file_name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<uint8_t> bytes(s.begin(), s.end());
  bytes.resize((bytes.size() + 31) / 32 * 32, 0);
  return gguf_from_bytes(std::move(bytes), path);
}

}  // namespace tally::test
