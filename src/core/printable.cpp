#include "core/printable.h"

#include <fmt/format.h>

#include "core/utf8.h"

namespace tally {

std::string printable(std::string_view s, const PrintableOptions& o) {
  std::string out;
  out.reserve(std::min(s.size(), o.max_bytes) + 8);
  size_t i = 0;
  while (i < s.size()) {
    const utf8::Decoded d = utf8::decode(s.substr(i));
    if (i + d.len > o.max_bytes) break;
    if (d.status != utf8::Status::Ok) {
      for (size_t k = 0; k < d.len; ++k) out += fmt::format("\\x{:02x}", static_cast<uint8_t>(s[i + k]));
    } else if (d.cp == '\n') {
      out += "\\n";
    } else if (d.cp == '\t') {
      out += "\\t";
    } else if (d.cp == '\r') {
      out += "\\r";
    } else if (d.cp < 0x20 || d.cp == 0x7F) {
      out += fmt::format("\\x{:02x}", d.cp);
    } else if (d.cp >= 0x80 && d.cp < 0xA0) {  // C1 controls (0x9B is a terminal's CSI)
      out += fmt::format("\\u{:04x}", d.cp);
    } else if (o.escape_quotes && (d.cp == '\\' || d.cp == '"')) {
      out += '\\';
      out += static_cast<char>(d.cp);
    } else {
      out.append(s.substr(i, d.len));
    }
    i += d.len;
  }
  if (i < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string excerpt(std::string_view s, size_t max_bytes) {
  PrintableOptions o;
  o.max_bytes = max_bytes;
  return printable(s, o);
}

}  // namespace tally
