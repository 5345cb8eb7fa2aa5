#include "tokenizer/byte_unicode.h"

#include <array>

#include "core/utf8.h"

namespace tally::byte_unicode {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 0x200> from_cp{};  // every mapped code point is below U+0200

  Tables() {
    from_cp.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool keeps = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = keeps ? static_cast<uint32_t>(b) : next++;
      to_utf8[b] = utf8::encode(to_cp[b]);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return tables().to_cp[b]; }

std::string_view byte_to_utf8(uint8_t b) { return tables().to_utf8[b]; }

int cp_to_byte(uint32_t cp) { return cp < 0x200 ? tables().from_cp[cp] : -1; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(t.to_utf8[static_cast<uint8_t>(c)]);
  return out;
}

std::string decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    const size_t len = d.len == 0 ? text.size() - i : d.len;
    const int b = d.status == utf8::Status::Ok ? cp_to_byte(d.cp) : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace tally::byte_unicode
