#pragma once
// Byte and token counts as people write and read them: "147456 B (144.00
// KiB)" out, "24GiB", "24GB" or "25769803776" in, and "8k" tokens. One parser
// serves every flag that takes a size, another every count of tokens.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tally {

// "147456 B (144.00 KiB)"
std::string format_bytes(uint64_t bytes);
// "144.0 KiB", "1.04 GiB": three significant digits, for progress and listings.
std::string format_bytes_short(uint64_t bytes);
// "25769803776", "24GiB", "4.9GiB", "24GB" -> bytes: a whole number of bytes
// (optionally "B"), or a number with a unit, KiB/MiB/GiB/TiB (powers of
// 1024) or KB/MB/GB/TB (powers of 1000), its case ignored; a fraction is
// rounded to the nearest byte. `what` names the value in errors. Zero is refused.
uint64_t parse_byte_count(std::string_view text, std::string_view what);
// "8192", "8k", "128K", "1.5k", "1M" -> tokens: k is 1024 and M 1048576 (a
// context of 8k is 8192 tokens); the result must be whole. Zero is allowed
// (callers bound it). `what` names the value in errors.
uint64_t parse_token_count(std::string_view text, std::string_view what);
// A whole decimal number, or nullopt (empty, sign, other characters, overflow).
std::optional<uint64_t> parse_whole(std::string_view s);
// s without leading and trailing spaces and tabs.
std::string_view trim(std::string_view s);

}  // namespace tally
