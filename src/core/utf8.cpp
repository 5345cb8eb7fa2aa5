#include "core/utf8.h"

namespace tally::utf8 {

size_t sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

Decoded decode(std::string_view s) {
  if (s.empty()) return {Status::Incomplete, 0, 0};
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Status::Ok, b0, 1};
  const size_t n = sequence_length(b0);
  if (n == 1) return {Status::Invalid, 0, 1};  // continuation byte, C0/C1, F5..FF
  // The second byte's allowed range depends on the lead (Unicode Table 3-7):
  // this rejects overlong forms, surrogates and values above U+10FFFF.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 == 0xE0) lo = 0xA0;
  else if (b0 == 0xED) hi = 0x9F;
  else if (b0 == 0xF0) lo = 0x90;
  else if (b0 == 0xF4) hi = 0x8F;
  uint32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < n; ++i) {
    if (i >= s.size()) return {Status::Incomplete, 0, s.size()};
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Status::Invalid, 0, i};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Status::Ok, cp, n};
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(uint32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Decoded d = decode(s.substr(i));
    if (d.status == Status::Ok) {
      out.append(s.substr(i, d.len));
    } else {
      out.append(kReplacement);
    }
    i += d.len;
  }
  return out;
}

size_t complete_prefix(std::string_view s) {
  // Only the last (up to 3) bytes can start an incomplete sequence.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte cannot start a sequence
    const Decoded d = decode(s.substr(i));
    if (d.status == Status::Incomplete) return i;
  }
  return s.size();
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Decoded d = decode(s.substr(i));
    if (d.status != Status::Ok) return false;
    i += d.len;
  }
  return true;
}

}  // namespace tally::utf8
