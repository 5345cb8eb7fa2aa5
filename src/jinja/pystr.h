#pragma once
// Python's str semantics on UTF-8 bytes where chat templates need them:
// which code points are whitespace (str.isspace, regex \s) and printable
// (str.isprintable, used by repr), and strip/split as str.strip/str.split do.
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic
// (with Python's full mappings there, e.g. upper("ß") == "SS"); characters of
// other scripts keep their case, where Python would map some of them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::jinja::pystr {

bool is_space(uint32_t cp);
bool is_printable(uint32_t cp);

// The code point starting at s[i] and its length; an ill-formed byte is
// returned as itself (0x80..0xFF) with length 1.
uint32_t code_point_at(std::string_view s, size_t i, size_t* len);

// Byte ranges [begin, end) of str.strip()/lstrip()/rstrip(): with `chars`
// null, whitespace; otherwise any code point of *chars.
size_t lstrip_pos(std::string_view s, const std::string_view* chars);
size_t rstrip_pos(std::string_view s, const std::string_view* chars);

// str.split(sep, maxsplit) as byte ranges; sep null: runs of whitespace.
std::vector<std::pair<size_t, size_t>> split(std::string_view s, const std::string_view* sep, int64_t maxsplit);
std::vector<std::pair<size_t, size_t>> rsplit(std::string_view s, const std::string_view* sep, int64_t maxsplit);
// str.splitlines() (without keepends) as byte ranges.
std::vector<std::pair<size_t, size_t>> splitlines(std::string_view s);

// The upper / lower case of one code point, appended as UTF-8.
void append_upper(std::string& out, uint32_t cp);
void append_lower(std::string& out, uint32_t cp);
bool is_lower_cp(uint32_t cp);  // a cased lower-case letter
bool is_upper_cp(uint32_t cp);  // a cased upper-case letter

char ascii_upper(char c);
char ascii_lower(char c);
bool is_cased_upper(char c);
bool is_cased_lower(char c);

}  // namespace tally::jinja::pystr
