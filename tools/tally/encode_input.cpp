#include "encode_input.h"

#include <fmt/format.h>

#include "core/printable.h"

namespace tally::cli {

std::vector<int32_t> encode_input(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                                  std::string_view what) {
  Tokenizer::EncodeStats stats;
  std::vector<int32_t> ids = tok.encode(text, add_special, parse_special, &stats);
  if (stats.replaced > 0)
    fmt::print(stderr,
               "tally: warning: {} has {} character{} with bytes this vocabulary has no token for (the first at byte "
               "{}); {} replaced by U+FFFD\n",
               what, stats.replaced, stats.replaced == 1 ? "" : "s", stats.first_replaced,
               stats.replaced == 1 ? "it was" : "each was");
  if (stats.unknown > 0)
    fmt::print(stderr,
               "tally: warning: {} has {} character{} this vocabulary cannot spell (it has no byte tokens; the first "
               "at byte {}); {} the unknown token {}\n",
               what, stats.unknown, stats.unknown == 1 ? "" : "s", stats.first_unknown,
               stats.unknown == 1 ? "it became" : "each became", printable(tok.token_text(tok.unk_id())));
  return ids;
}

void warn_not_instruct(std::string_view model) {
  fmt::print(stderr,
             "tally: warning: {} has no chat template: it is a base model, not an instruct model, so its replies "
             "may ramble or repeat (the chat uses its family's instruction template)\n",
             model);
}

}  // namespace tally::cli
