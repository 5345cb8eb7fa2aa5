#pragma once
// UTF-8 helpers shared by the tokenizers and the streaming decoder. They never
// trust their input: ill-formed sequences (overlong forms, surrogates, code
// points above U+10FFFF, stray continuation bytes) are reported, not decoded.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tally::utf8 {

enum class Status { Ok, Invalid, Incomplete };

// The result of decoding the sequence at the start of a byte range.
// Ok: `len` bytes form the code point `cp`. Invalid: the first `len` bytes
// (the maximal ill-formed subpart, at least 1) are to be replaced by one
// U+FFFD. Incomplete: all bytes left are a valid prefix of a longer sequence.
struct Decoded {
  Status status;
  uint32_t cp;
  size_t len;
};

Decoded decode(std::string_view s);

// Appends the UTF-8 form of `cp` (assumed a valid scalar value).
void append(std::string& out, uint32_t cp);
std::string encode(uint32_t cp);

// Number of bytes of a sequence whose first byte is `lead` (1 for invalid leads).
size_t sequence_length(uint8_t lead);

// Replaces every ill-formed subpart (including a truncated tail) with U+FFFD.
std::string sanitize(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a sequence that
// could still be completed by more bytes; the rest is an incomplete tail.
size_t complete_prefix(std::string_view s);

bool is_valid(std::string_view s);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace tally::utf8
