#pragma once
// Byte counts as people write and read them: "147456 B (144.00 KiB)" out,
// "24GiB" or "25769803776" in. One parser serves every flag that takes a size.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tally {

// "147456 B (144.00 KiB)"
std::string format_bytes(uint64_t bytes);
// "144.0 KiB", "1.04 GiB": three significant digits, for progress and listings.
std::string format_bytes_short(uint64_t bytes);
// "25769803776", "24GiB", "512MiB" -> bytes (binary units KiB/MiB/GiB/TiB).
// `what` names the flag in errors. Zero is refused.
uint64_t parse_byte_count(std::string_view text, std::string_view what);
// A whole decimal number, or nullopt (empty, sign, other characters, overflow).
std::optional<uint64_t> parse_whole(std::string_view s);
// s without leading and trailing spaces and tabs.
std::string_view trim(std::string_view s);

}  // namespace tally
