#include "server/http_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <optional>

#include "core/byte_size.h"

namespace tally::server {

namespace bhttp = boost::beast::http;

namespace {
// Bytes held of a chunk header line before it ends; for the last chunk, of
// its line, trailer fields and the empty line that ends them.
constexpr size_t kMaxChunkLine = 4096;
constexpr const char* kMalformedChunk = "the chunked request body is malformed";

// The unread body from the first byte of its chunk header line: after the
// CRLF that ends the previous chunk's data (`after_chunk`). Empty when that
// CRLF is not (yet) there; Beast refuses or waits for it.
std::string_view chunk_line(std::string_view b, bool after_chunk) {
  if (!after_chunk) return b;
  return b.substr(0, 2) == "\r\n" ? b.substr(2) : std::string_view{};
}

// A chunk line's size: its leading hex digits.
std::string_view chunk_size(std::string_view line) {
  return line.substr(0, line.find_first_not_of("0123456789abcdefABCDEF"));
}

// Whether a line's size is all zeros: the last chunk's.
bool last_chunk(std::string_view line) {
  const std::string_view size = chunk_size(line);
  return !size.empty() && size.find_first_not_of('0') == std::string_view::npos;
}

// Why the chunk header at the start of `line` is over kMaxChunkLine, or
// nothing while it is not (yet). It depends only on the first
// kMaxChunkLine + 1 bytes, and is nothing for any bytes Beast judges before
// those: Beast reads a chunk line up to its first CR, and waits for the last
// chunk's trailer to end before it reads it, so whether a header is too long
// does not depend on how the body was cut into pieces.
std::optional<std::string> chunk_header_too_long(std::string_view line) {
  if (line.size() <= kMaxChunkLine) return std::nullopt;  // no scan while it cannot be: pieces cost O(piece)
  const size_t cr = line.substr(0, kMaxChunkLine + 1).find('\r');
  if (cr == std::string_view::npos || cr > kMaxChunkLine)
    return fmt::format("a chunk header of the request body is longer than {} bytes", kMaxChunkLine);
  if (cr + 1 >= line.size() || line[cr + 1] != '\n' || !last_chunk(line.substr(0, cr))) return std::nullopt;
  const size_t end = line.substr(0, kMaxChunkLine).find("\r\n\r\n", cr);  // the trailer's end, as Beast finds it
  if (end != std::string_view::npos && end + 4 <= kMaxChunkLine) return std::nullopt;
  return fmt::format("the last chunk of the request body and its trailer fields are longer than {} bytes",
                     kMaxChunkLine);
}

// Whether the chunk header at the start of `line` is all there: its line,
// and for the last chunk the end of its trailer fields too. Beast asks for
// more bytes on a whole header only when its extensions do not end on their
// line: Beast reads extensions up to the end of what it was given, not of
// the line.
bool whole_chunk_header(std::string_view line) {
  line = line.substr(0, kMaxChunkLine + 2);  // a longer header is refused before
  const size_t eol = line.find("\r\n");
  if (eol == std::string_view::npos || chunk_size(line).empty()) return false;
  return !last_chunk(line.substr(0, eol)) || line.find("\r\n\r\n", eol) != std::string_view::npos;
}
}  // namespace

// Beast's parser, and where it is in a chunked body: Beast keeps that to
// itself, and the bound on chunk header lines is checked before Beast reads
// one (chunk_header_too_long).
struct RequestReader::Beast {
  struct OnChunkHeader {
    Beast* beast;
    void operator()(uint64_t size, boost::beast::string_view, boost::beast::error_code&) const {
      beast->chunk_left = size;
      beast->after_chunk = true;
    }
  };
  bhttp::request_parser<bhttp::string_body> parser;
  uint64_t chunk_left = 0;   // data bytes of the current chunk not yet read; 0 at a chunk header
  bool after_chunk = false;  // a chunk header was read: the next one starts with a CRLF
  OnChunkHeader on_chunk_header{this};
  Beast() { parser.on_chunk_header(on_chunk_header); }
};

RequestReader::RequestReader(const HttpLimits& limits, std::string carried)
    : limits_(limits), buffer_(std::move(carried)) {
  new_parser();
  started_ = !buffer_.empty();
  if (!buffer_.empty()) parse();
}

void RequestReader::new_parser() {
  beast_ = std::make_unique<Beast>();
  beast_->parser.header_limit(limits_.max_header_bytes);
  beast_->parser.body_limit(limits_.max_body_bytes);
  beast_->parser.eager(false);  // stop after the head: the caller answers before the body
}

RequestReader::~RequestReader() = default;

RequestReader::State RequestReader::fail(int status, std::string why) {
  if (req_.method.empty()) {  // the request line, when it was parsed before the error: for the log
    const auto& m = beast_->parser.get();
    req_.method = std::string(m.method_string());
    req_.target = std::string(m.target());
    req_.path = req_.target.substr(0, req_.target.find('?'));
  }
  state_ = State::Error;
  error_status_ = status;
  error_ = std::move(why);
  return state_;
}

RequestReader::State RequestReader::feed(std::string_view bytes) {
  if (state_ == State::Done || state_ == State::Error) return state_;
  if (!bytes.empty()) started_ = true;
  buffer_.append(bytes);
  if (state_ == State::HaveHead) return state_;
  // An unfinished head is parsed again from its start (parse()); a piece that
  // ends no line and keeps it within the limit can only show an error in the
  // unfinished line, which the line's end shows as well. Waiting for it makes
  // a head sent a byte at a time cost lines x head bytes, not head^2.
  if (!beast_->parser.is_header_done() && bytes.find('\n') == std::string_view::npos &&
      buffer_.size() <= limits_.max_header_bytes)
    return state_;
  return parse();
}

RequestReader::State RequestReader::continue_body() {
  if (state_ != State::HaveHead) return state_;
  state_ = State::Reading;  // parse() goes on from the parser's own state: the body
  if (beast_->parser.is_done()) {
    state_ = State::Done;
    req_.body = beast_->parser.release().body();
    return state_;
  }
  return parse();
}

bool RequestReader::expects_body() const {
  const auto& p = beast_->parser;
  return p.chunked() || (p.content_length() && *p.content_length() > 0);
}

RequestReader::State RequestReader::parse() {
  const bool in_body = beast_->parser.is_header_done();
  // Until the head is whole, a fresh parser reads all of it again with each
  // piece: a parser that has seen part of a head waits for the head's end
  // before it checks the rest again, so what it refuses, and with which
  // status, would depend on how the bytes were cut (a bad request line was
  // 400 read at once, 431 read a byte at a time). The head is at most
  // max_header_bytes, so this costs at most that much a piece.
  if (!in_body) new_parser();
  auto& p = beast_->parser;
  while (true) {
    const bool at_chunk_header = in_body && p.chunked() && beast_->chunk_left == 0;
    const std::string_view line = at_chunk_header ? chunk_line(buffer_, beast_->after_chunk) : std::string_view{};
    if (at_chunk_header) {
      if (auto why = chunk_header_too_long(line)) return fail(400, std::move(*why));
      // Beast asserts 5 bytes ("0\r\n\r\n") before it looks again for the
      // end of a last chunk that came first; fewer can only wait anyway.
      if (buffer_.size() < 5 && line.find("\r\n") != std::string_view::npos && last_chunk(line)) break;
    }
    boost::beast::error_code ec;
    const size_t used = p.put(boost::asio::buffer(buffer_.data(), buffer_.size()), ec);
    if (ec == bhttp::error::need_more && !p.is_header_done()) break;  // the head stays whole for the next piece
    if (in_body && !at_chunk_header && p.chunked()) beast_->chunk_left -= used;  // chunk data
    // A chunk header whose extensions run past their line is malformed.
    // Waiting would be wrong as well as slow: Beast subtracts the chunk's
    // size from the body limit before it reads the extensions, again at each
    // retry, so enough pieces turned this 400 into a 413; and after a last
    // chunk it read every byte that came on from the line's start again, for
    // as long as they came (both found by fuzz_http).
    if (ec == bhttp::error::need_more && at_chunk_header && whole_chunk_header(line))
      return fail(400, kMalformedChunk);
    buffer_.erase(0, used);
    if (ec == bhttp::error::need_more) break;
    if (ec == bhttp::error::body_limit)
      return fail(413, fmt::format("the request body is larger than the limit of {} (--max-body)",
                                   format_bytes(limits_.max_body_bytes)));
    if (ec == bhttp::error::header_limit)
      return fail(431, fmt::format("the request line and header fields are larger than {} bytes",
                                   limits_.max_header_bytes));
    if (ec == bhttp::error::bad_content_length)
      return fail(400, "Content-Length is not a decimal number of bytes, or stands beside Transfer-Encoding");
    if (ec == bhttp::error::multiple_content_length) return fail(400, "two Content-Length fields disagree");
    if (ec == bhttp::error::bad_transfer_encoding)
      return fail(400, "Transfer-Encoding appears twice, or beside a Content-Length");
    if (ec == bhttp::error::bad_chunk || ec == bhttp::error::bad_chunk_extension)
      return fail(400, kMalformedChunk);
    if (ec) return fail(400, fmt::format("malformed request: {}", ec.message()));
    if (!in_body && p.is_header_done()) {
      take_head();
      if (state_ == State::Error) return state_;
      state_ = State::HaveHead;
      return state_;
    }
    if (p.is_done()) {
      req_.body = p.release().body();
      state_ = State::Done;
      return state_;
    }
    if (used == 0 || buffer_.empty()) break;
  }
  return state_;
}

void RequestReader::take_head() {
  const auto& m = beast_->parser.get();
  req_.method = std::string(m.method_string());
  req_.target = std::string(m.target());
  req_.http10 = m.version() == 10;
  req_.keep_alive = m.keep_alive();
  for (const auto& f : m) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    req_.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  if (req_.target.empty() || req_.target[0] != '/') {
    fail(400, "the request target must be a path starting with '/'");
    return;
  }
  const size_t q = req_.target.find('?');
  req_.path = req_.target.substr(0, q);
  req_.query = q == std::string::npos ? "" : req_.target.substr(q + 1);
  // Beast takes two equal Content-Length fields as one; they are still a framing ambiguity.
  if (req_.header_count("content-length") > 1) {
    fail(400, "more than one Content-Length field");
    return;
  }
  if (req_.header_count("transfer-encoding") > 0 && !beast_->parser.chunked()) {
    fail(400, "Transfer-Encoding must be \"chunked\" (no other coding is accepted)");
    return;
  }
  if (req_.http10 && beast_->parser.chunked()) fail(400, "chunked bodies need HTTP/1.1");
}

}  // namespace tally::server
