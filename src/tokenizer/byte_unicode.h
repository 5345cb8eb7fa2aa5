#pragma once
// The GPT-2 byte-level alphabet: a bijection between the 256 byte values and
// 256 printable code points, so that any byte string maps to a printable
// token string and back. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF keep their
// value; the other 68 bytes map, in increasing order, to U+0100 onwards.
#include <cstdint>
#include <string>
#include <string_view>

namespace tally::byte_unicode {

// The code point a byte maps to.
uint32_t byte_to_cp(uint8_t b);
// The UTF-8 text of that code point (1 or 2 bytes).
std::string_view byte_to_utf8(uint8_t b);
// The byte a code point stands for, or -1 when it is not in the alphabet.
int cp_to_byte(uint32_t cp);

// Maps every byte of `bytes` to its code point's UTF-8 text.
std::string encode(std::string_view bytes);
// Inverse of encode(); code points outside the alphabet are copied as UTF-8
// (as are ill-formed bytes), so a token string that is not byte-level text
// decodes to itself.
std::string decode(std::string_view text);

}  // namespace tally::byte_unicode
