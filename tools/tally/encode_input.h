#pragma once
// User text (a prompt, a text file) to tokens, saying so on stderr when some
// of it could not be spelled by the vocabulary and became U+FFFD: input is
// never changed or dropped without a word.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tally::cli {

// `what` names the input in the warning ("the prompt", "the text file").
std::vector<int32_t> encode_input(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                                  std::string_view what);

}  // namespace tally::cli
