#pragma once
// User text (a prompt, a text file) to tokens, saying so on stderr when some
// of it could not be spelled by the vocabulary and became U+FFFD (or, in a
// SentencePiece vocabulary without byte tokens, the unknown token): input is
// never changed or dropped without a word.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tally::cli {

// `what` names the input in the warning ("the prompt", "the text file").
std::vector<int32_t> encode_input(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                                  std::string_view what);

// One line on stderr for a chat with a model that has no chat template of
// its own (a base model chatted with through its family's template).
void warn_not_instruct(std::string_view model);

}  // namespace tally::cli
