#pragma once
// A Hugging Face model folder read as the GGUF file llama.cpp's converter
// would write from it, so that the model loader, the tokenizer and the
// planner read one description: config.json becomes `<arch>.*` metadata,
// the safetensors weights (model.safetensors, or the shards listed in
// model.safetensors.index.json) keep their mapping under GGUF tensor names
// with the dimensions reversed, and tokenizer.json (with tokenizer_config.json
// and chat_template.jinja when present) becomes `tokenizer.ggml.*`.
// Architectures: those of model/architecture.h, whose HfLayout says what
// differs (model_type, config fields, norm names, weight transforms done in
// a copy as the converter does them: llama's q and k rows permuted into
// adjacent RoPE pairs, gemma3's norm weights w stored as 1 + w).
// Tokenizers: byte-level BPE whose pre-tokenizer is one tally knows (gpt-2,
// smollm, qwen2, llama-bpe), and SentencePiece BPE
// with byte fallback as Gemma's tokenizer.json holds it (read as a
// SentencePiece vocabulary whose scores follow the merges' order).
// Every error names the file and the field or tensor.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"

namespace tally {

// Whether `path` names a directory (then read as an HF folder).
bool is_model_folder(const std::string& path);

// The GGUF view of an HF folder.
std::unique_ptr<GgufFile> open_hf_folder(const std::string& dir);

// The files of a folder as open_hf_folder reads them (fuzzing builds them in memory).
struct HfFolderParts {
  std::string dir;                              // names the folder (errors, general.name)
  std::string config;                           // config.json
  std::vector<SafetensorsFile> weights;         // the safetensors files, in order
  std::string tokenizer;                        // tokenizer.json
  std::optional<std::string> tokenizer_config;  // tokenizer_config.json, when present
  std::optional<std::string> chat_template;     // chat_template.jinja, when present
};
std::unique_ptr<GgufFile> assemble_hf_model(HfFolderParts parts);

// A GGUF file, or the GGUF view of an HF folder when `path` is a directory.
std::unique_ptr<GgufFile> open_model_file(const std::string& path);

}  // namespace tally
