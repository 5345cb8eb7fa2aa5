// libFuzzer target for the HF folder translation (-m DIR): config.json,
// tokenizer.json, tokenizer_config.json and chat_template.jinja from one
// input (split at 0x00 bytes, in that order; missing parts are absent files),
// beside a safetensors file made to fit the config, so that inputs get past
// the weight checks to the tokenizer: the final norm, token embeddings of
// vocab_size rows (up to 2^16; a larger vocab_size gets 8 rows, and the
// mismatch), and an lm_head unless tie_word_embeddings (Gemma 3: by
// default) says the output is the embedding. Any texts must give a GGUF view
// or a tally::Error whose message is one bounded line; a view it gives must
// load its tokenizer (or refuse it the same way).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "fuzz_checks.h"
#include "model/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr const char* kTarget = "fuzz_hf_folder";

// F32 tensors of 4 columns: model.norm.weight [4], the embeddings [rows, 4]
// and, when asked, lm_head [rows, 4]; all zero, header padded to 8 bytes.
std::vector<uint8_t> weights_image(uint64_t rows, bool lm_head) {
  const uint64_t m = rows * 16;
  std::string h = R"({"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)";
  h += R"("model.embed_tokens.weight":{"dtype":"F32","shape":[)" + std::to_string(rows) + R"(,4],"data_offsets":[16,)" +
       std::to_string(16 + m) + "]}";
  if (lm_head)
    h += R"(,"lm_head.weight":{"dtype":"F32","shape":[)" + std::to_string(rows) + R"(,4],"data_offsets":[)" +
         std::to_string(16 + m) + "," + std::to_string(16 + 2 * m) + "]}";
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  std::vector<uint8_t> b(8 + h.size() + 16 + (lm_head ? 2 : 1) * m, 0);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(h.size() >> (8 * i));
  std::copy(h.begin(), h.end(), b.begin() + 8);
  return b;
}

// What the config asks of the weights: vocab_size rows (when small), an lm_head.
std::pair<uint64_t, bool> weights_for(const std::string& config) {
  uint64_t rows = 8;
  bool lm_head = true;
  const auto j = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (const auto v = j.find("vocab_size"); v != j.end() && v->is_number_unsigned() && v->get<uint64_t>() >= 1 &&
                                              v->get<uint64_t>() <= (1u << 16))
      rows = v->get<uint64_t>();
    const auto tie = j.find("tie_word_embeddings");
    const auto type = j.find("model_type");
    lm_head = tie != j.end() && tie->is_boolean() ? !tie->get<bool>() : !(type != j.end() && *type == "gemma3_text");
  }
  return {rows, lm_head};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> texts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && texts.size() < 4) texts.emplace_back();
    else texts.back().push_back(static_cast<char>(data[i]));
  }
  try {
    tally::HfFolderParts parts;
    parts.dir = "fuzz";
    parts.config = texts[0];
    const auto [rows, lm_head] = weights_for(texts[0]);
    const std::vector<uint8_t> weights = weights_image(rows, lm_head);
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
