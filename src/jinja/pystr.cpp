#include "jinja/pystr.h"

#include "core/utf8.h"

namespace tally::jinja::pystr {

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_printable(uint32_t cp) {
  if (cp == 0x20) return true;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (is_space(cp)) return false;  // Zs, Zl, Zp
  // Format characters, surrogates, private use and noncharacters (Cf, Cs, Co, Cn).
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E) return false;
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F)) return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;
  if (cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return false;
  if ((cp >= 0xE0000 && cp <= 0xE007F) || cp >= 0xF0000) return false;
  return true;
}

uint32_t code_point_at(std::string_view s, size_t i, size_t* len) {
  const utf8::Decoded d = utf8::decode(s.substr(i));
  if (d.status == utf8::Status::Ok) {
    *len = d.len;
    return d.cp;
  }
  *len = 1;
  return static_cast<uint8_t>(s[i]);
}

namespace {

bool in_chars(uint32_t cp, const std::string_view* chars) {
  if (chars == nullptr) return is_space(cp);
  for (size_t i = 0; i < chars->size();) {
    size_t n = 0;
    if (code_point_at(*chars, i, &n) == cp) return true;
    i += n;
  }
  return false;
}

// Start of the code point that ends at byte `end` (exclusive).
size_t prev_start(std::string_view s, size_t end) {
  size_t b = end - 1;
  // Walk back over at most 3 continuation bytes to a lead that spans to `end`.
  for (size_t k = 0; k < 3 && b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80; ++k) --b;
  size_t n = 0;
  code_point_at(s, b, &n);
  return b + n == end ? b : end - 1;
}

}  // namespace

size_t lstrip_pos(std::string_view s, const std::string_view* chars) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    if (!in_chars(code_point_at(s, i, &n), chars)) break;
    i += n;
  }
  return i;
}

size_t rstrip_pos(std::string_view s, const std::string_view* chars) {
  size_t e = s.size();
  while (e > 0) {
    const size_t b = prev_start(s, e);
    size_t n = 0;
    if (!in_chars(code_point_at(s, b, &n), chars)) break;
    e = b;
  }
  return e;
}

std::vector<std::pair<size_t, size_t>> split(std::string_view s, const std::string_view* sep, int64_t maxsplit) {
  std::vector<std::pair<size_t, size_t>> out;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t p = s.find(*sep, start);
      if (p == std::string_view::npos) break;
      out.emplace_back(start, p);
      start = p + sep->size();
    }
    out.emplace_back(start, s.size());
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size()) {  // skip whitespace
      size_t n = 0;
      if (!is_space(code_point_at(s, i, &n))) break;
      i += n;
    }
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with trailing whitespace removed, is the last piece.
      out.emplace_back(i, rstrip_pos(s, nullptr));
      break;
    }
    const size_t b = i;
    while (i < s.size()) {
      size_t n = 0;
      if (is_space(code_point_at(s, i, &n))) break;
      i += n;
    }
    out.emplace_back(b, i);
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> rsplit(std::string_view s, const std::string_view* sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::pair<size_t, size_t>> out;
  if (sep != nullptr) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit && end >= sep->size()) {
      const size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string_view::npos) break;
      out.emplace_back(p + sep->size(), end);
      end = p;
    }
    out.emplace_back(0, end);
  } else {
    size_t e = s.size();
    while (true) {
      while (e > 0) {
        const size_t b = prev_start(s, e);
        size_t n = 0;
        if (!is_space(code_point_at(s, b, &n))) break;
        e = b;
      }
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(lstrip_pos(s, nullptr), e);
        break;
      }
      size_t b = e;
      while (b > 0) {
        const size_t p = prev_start(s, b);
        size_t n = 0;
        if (is_space(code_point_at(s, p, &n))) break;
        b = p;
      }
      out.emplace_back(b, e);
      e = b;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::pair<size_t, size_t>> splitlines(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    size_t n = 0;
    const uint32_t cp = code_point_at(s, i, &n);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
                     cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) {
      i += n;
      continue;
    }
    out.emplace_back(start, i);
    i += n;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.emplace_back(start, s.size());
  return out;
}

namespace {

// Simple case pairs of the scripts covered; 0 when cp has no other case.
uint32_t upper_of(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : 0;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137 && c != 0x130) return c == 0x131 ? 'I' : (c & 1) ? c - 1 : 0;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? 0 : c - 1;
  if (c >= 0x14A && c <= 0x177) return (c & 1) ? c - 1 : 0;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? 0 : c - 1;
  if (c == 0x17F) return 'S';
  if ((c >= 0x3B1 && c <= 0x3C1) || (c >= 0x3C3 && c <= 0x3CB)) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c & 1) ? c - 1 : 0;
  return 0;
}

uint32_t lower_of(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : 0;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x137 && c != 0x130 && c != 0x131) return (c & 1) ? 0 : c + 1;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c + 1 : 0;
  if (c >= 0x14A && c <= 0x177) return (c & 1) ? 0 : c + 1;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c + 1 : 0;
  if ((c >= 0x391 && c <= 0x3A1) || (c >= 0x3A3 && c <= 0x3AB)) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c & 1) ? 0 : c + 1;
  return 0;
}

}  // namespace

void append_upper(std::string& out, uint32_t cp) {
  if (cp == 0xDF) {
    out += "SS";
    return;
  }
  const uint32_t u = upper_of(cp);
  utf8::append(out, u ? u : cp);
}

void append_lower(std::string& out, uint32_t cp) {
  if (cp == 0x130) {
    out += "i\xCC\x87";  // i + combining dot above
    return;
  }
  const uint32_t l = lower_of(cp);
  utf8::append(out, l ? l : cp);
}

bool is_lower_cp(uint32_t cp) { return upper_of(cp) != 0 || cp == 0xDF; }
bool is_upper_cp(uint32_t cp) { return lower_of(cp) != 0 || cp == 0x130; }

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool is_cased_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_cased_lower(char c) { return c >= 'a' && c <= 'z'; }

}  // namespace tally::jinja::pystr
