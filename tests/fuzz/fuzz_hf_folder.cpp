// libFuzzer target for the HF folder translation (-m DIR): config.json,
// tokenizer.json, tokenizer_config.json and chat_template.jinja from one
// input (split at 0x00 bytes, in that order; missing parts are absent files),
// beside a fixed one-tensor safetensors file. Any texts must give a GGUF view
// or a tally::Error whose message is one bounded line; a view it gives must
// load its tokenizer (or refuse it the same way).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_checks.h"
#include "io/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr const char* kTarget = "fuzz_hf_folder";

// model.norm.weight, F32 [4], header padded to 8 bytes.
std::vector<uint8_t> weights_image() {
  std::string h = R"({"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  std::vector<uint8_t> b(8 + h.size() + 16, 0);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(h.size() >> (8 * i));
  std::copy(h.begin(), h.end(), b.begin() + 8);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<uint8_t> weights = weights_image();
  std::vector<std::string> texts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && texts.size() < 4) texts.emplace_back();
    else texts.back().push_back(static_cast<char>(data[i]));
  }
  try {
    tally::HfFolderParts parts;
    parts.dir = "fuzz";
    parts.config = texts[0];
    parts.weights.emplace_back(weights.data(), weights.size(), "fuzz/model.safetensors");
    parts.tokenizer = texts.size() > 1 ? texts[1] : "";
    if (texts.size() > 2) parts.tokenizer_config = texts[2];
    if (texts.size() > 3) parts.chat_template = texts[3];
    const auto view = tally::assemble_hf_model(std::move(parts));
    try {
      const tally::Tokenizer tok = tally::Tokenizer::from_gguf(*view);
      if (tok.n_vocab() < 1) tally_fuzz::violated(kTarget, "empty vocabulary accepted", texts[1]);
    } catch (const tally::Error& e) {
      tally_fuzz::check_message(kTarget, e);
    }
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
  }
  return 0;
}
