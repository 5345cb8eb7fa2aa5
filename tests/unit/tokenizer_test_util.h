#pragma once
// Helpers shared by the tokenizer tests: opening the shared vocabulary-only
// GGUFs and parsing synthetic GGUF images built in memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf_builder.h"
#include "io/gguf.h"

namespace tally::test {

inline const std::string kVocabDir = TALLY_SHARED_DIR "/testdata/tokenizer/";

// The shared test data lives beside the project (../shared), not in it: a
// clone of the project alone has none. TALLY_REQUIRE_SHARED=1 (set by
// .ci/run) turns the skip into a failure.
inline bool shared_data_present() { return std::filesystem::is_directory(kVocabDir); }
inline bool shared_data_required() {
  const char* r = std::getenv("TALLY_REQUIRE_SHARED");
  return r != nullptr && std::string(r) == "1";
}

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

// Skips the test (or fails it under TALLY_REQUIRE_SHARED=1) when ../shared/testdata is absent.
#define TALLY_NEED_SHARED()                                                                                 \
  do {                                                                                                      \
    if (!tally::test::shared_data_present()) {                                                              \
      if (tally::test::shared_data_required()) FAIL() << "shared test data missing: " << tally::test::kVocabDir; \
      GTEST_SKIP() << "shared test data not found at " << tally::test::kVocabDir                           \
                   << " (it sits beside the project as ../shared)";                                         \
    }                                                                                                       \
  } while (0)
