#include "tokenizer/stream_decoder.h"

#include "core/utf8.h"

namespace tally {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special), strip_pending_(tok.strips_leading_space()) {}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_bytes(id, render_special_);  // throws before any state change
  if (piece.empty()) return {};
  if (strip_pending_ && piece[0] == ' ') piece.erase(0, 1);
  strip_pending_ = false;
  pending_ += piece;
  const size_t done = utf8::complete_prefix(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, done));
  pending_.erase(0, done);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  strip_pending_ = tok_.strips_leading_space();
  return out;
}

}  // namespace tally
